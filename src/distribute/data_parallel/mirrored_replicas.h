#pragma once
// The part the mirrored family's strategies hold (MirroredStrategy, CentralStorageStrategy,
// LocalSgdStrategy, MultiWorkerMirroredStrategy), not a base they derive from: MirroredOptions
// checked once, the replicas' threads (the owner's executors, run_replicas_on), the cross-device
// group they reduce in, and the split and reduction the options ask for.
#include <memory>
#include <string>

#include "distribute/replica_threads.h"
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

class MirroredReplicas {
 public:
  // `who` names the owner in errors ("MirroredStrategy").
  MirroredReplicas(StrategyExtended& owner, MirroredOptions options, const char* who);
  const MirroredOptions& options() const { return options_; }
  int count() const { return threads_->replicas(); }  // this process's replicas
  ReplicaThreads& threads() { return *threads_; }
  // Deterministic: micro_batches fixed parts, reduced in order; else one part per replica, of the
  // `in_sync` replicas over every process (0: this process's).
  void split_batch(int64_t rows, BatchSplit& split, int in_sync = 0) const;
  // "family:N" (in_sync replicas), ":deterministic" added in that mode.
  std::string name(const char* family, int in_sync) const;
  GradientReduction gradient_reduction() const;

 private:
  std::vector<std::unique_ptr<Communicator>> make_cross_device_ops(int replicas, const char* who) const;
  MirroredOptions options_;
  std::unique_ptr<ReplicaThreads> threads_;
};

}  // namespace tandem::distribute
