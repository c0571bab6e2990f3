// DefaultStrategy: a model's strategy outside any scope (tandem/distribute/strategy.h).
#include "distribute/update_rules.h"
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

DefaultExtended::DefaultExtended() : comm_(make_in_process_communicators(1)) {}

UpdateRule& DefaultExtended::update_rule() const { return plain_update_rule(); }

}  // namespace tandem::distribute
