#pragma once
// The update rules of the synchronous data-parallel strategies (StrategyExtended::update_rule).
#include "tandem/distribute/update_rule.h"

namespace tandem::distribute {

// One replica, alone: the optimizer applied as it is (the default strategy).
UpdateRule& plain_update_rule();
// Mirrored variables: every replica updates its own copy with its own copy of the slots.
UpdateRule& mirrored_update_rule();
// Central storage: one shared copy, updated once, by replica 0.
UpdateRule& central_update_rule();

}  // namespace tandem::distribute
