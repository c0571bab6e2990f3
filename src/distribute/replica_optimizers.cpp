// The replicas' copies of an optimizer's slots (StrategyExtended::replica_optimizer): under a mirroring
// strategy every replica updates its own copy of the variables with its own copy of the slots.
#include <map>
#include <mutex>

#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

struct StrategyExtended::ReplicaOptimizers {
  struct Copies {
    std::vector<std::unique_ptr<Optimizer>> of_replica;  // [0] unused: the optimizer itself
    bool ready = false;
  };
  std::mutex mutex;
  std::map<uint64_t, Copies> by_optimizer;  // by Optimizer::id
};

StrategyExtended::StrategyExtended() : replica_optimizers_(std::make_unique<ReplicaOptimizers>()) {}
StrategyExtended::~StrategyExtended() = default;

Optimizer& StrategyExtended::replica_optimizer(Optimizer& optimizer, const ReplicaContext& replica,
                                               std::span<Variable* const> variables) {
  int r = replica.local_replica_id;  // the copies are this process's
  ReplicaOptimizers& all = *replica_optimizers_;
  ReplicaOptimizers::Copies* copies = nullptr;
  {
    std::lock_guard lock(all.mutex);
    copies = &all.by_optimizer[optimizer.id()];  // a map's elements stay where they are
    if (copies->ready) return r == 0 ? optimizer : *copies->of_replica[static_cast<size_t>(r)];
  }
  // First replicated step with this optimizer: replica 0's slots exist before the others copy
  // them, and nobody updates until every copy is made. `ready` is set after the second barrier,
  // so every replica of this step saw it false.
  Communicator& comm = *replica.communicator;
  if (r == 0) optimizer.build(variables);
  comm.barrier();
  Optimizer* mine = &optimizer;
  if (r > 0) {
    std::unique_ptr<Optimizer> copy = optimizer.replicate(variables);
    mine = copy.get();
    std::lock_guard lock(all.mutex);
    copies->of_replica.resize(static_cast<size_t>(replica.num_local_replicas));
    copies->of_replica[static_cast<size_t>(r)] = std::move(copy);
  }
  comm.barrier();
  if (r == 0) {
    std::lock_guard lock(all.mutex);
    copies->ready = true;
  }
  return *mine;
}

void StrategyExtended::forget_replica_optimizers() {
  std::lock_guard lock(replica_optimizers_->mutex);
  replica_optimizers_->by_optimizer.clear();
}

}  // namespace tandem::distribute
