#pragma once
// How gradients become an update inside a strategy's replica: the strategy's UpdateRule
// (StrategyExtended::update_rule). It is an UpdateRoute (tandem/optimizers.h): the strategy sets it on
// each replica's thread, so that Optimizer::apply in a custom loop follows it; fit's step, which
// reduces the gradients itself, calls apply_reduced. The optimizer stays plain: the rule decides
// which copy of the variables is updated and with which copy of the slots
// (StrategyExtended::replica_optimizer).
#include <span>

#include "tandem/optimizers.h"

namespace tandem::distribute {

class UpdateRule : public UpdateRoute {
 public:
  // apply(optimizer, variables, gradients), the route's: this replica's gradients, reduced over
  // the replicas as the strategy does, then applied.
  // Gradients already reduced over the replicas: only the update.
  virtual void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                             std::span<const Tensor> reduced) = 0;
};

}  // namespace tandem::distribute
