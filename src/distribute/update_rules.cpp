// The synchronous data-parallel update rules (update_rules.h).
#include "distribute/update_rules.h"

#include "distribute/gradient_reducer.h"
#include "tandem/collectives/replica_context.h"
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {
namespace {

// Mirrored variables: the gradients reduced over the replicas by the strategy's policy (custom
// loops; fit's step reduces them itself), then every replica updates its own copy of the
// variables with its own copy of the slots.
class MirroredUpdate : public UpdateRule {
 public:
  void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) override {
    const ReplicaContext* replica = replica_context();
    if (replica->num_replicas == 1) return optimizer.apply_here(variables, gradients);
    apply_reduced(optimizer, variables,
                  reduce_replica_gradients(*replica, replica->strategy->extended().gradient_reduction(), gradients));
  }
  void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                     std::span<const Tensor> reduced) override {
    const ReplicaContext& replica = *replica_context();
    replica.strategy->extended().replica_optimizer(optimizer, replica, variables).apply_here(variables, reduced);
  }
};

// Central storage: one shared copy, updated once by replica 0 (every replica is past its
// backward pass: the reduction waited for all).
class CentralUpdate : public MirroredUpdate {
 public:
  void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                     std::span<const Tensor> reduced) override {
    if (replica_context()->replica_id == 0) optimizer.apply_here(variables, reduced);
  }
};

class PlainUpdate : public UpdateRule {
 public:
  void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) override {
    optimizer.apply_here(variables, gradients);
  }
  void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                     std::span<const Tensor> reduced) override {
    optimizer.apply_here(variables, reduced);
  }
};

}  // namespace

UpdateRule& plain_update_rule() {
  static PlainUpdate rule;
  return rule;
}

UpdateRule& mirrored_update_rule() {
  static MirroredUpdate rule;
  return rule;
}

UpdateRule& central_update_rule() {
  static CentralUpdate rule;
  return rule;
}

}  // namespace tandem::distribute
