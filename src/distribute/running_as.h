#pragma once
// A thread running as one replica of a strategy: its replica context, which carries the
// strategy's update rule, set while alive (strategies set it on each replica's thread).
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

// Runs as replica r of s while alive.
class RunningAs {
 public:
  RunningAs(StrategyExtended& s, int r)
      : context_{s.strategy(),
                 &s.communicator(r),
                 s.first_local_replica() + r,
                 s.num_replicas_in_sync(),
                 s.first_row(r),
                 r,
                 s.num_local_replicas(),
                 s.batch_group(r),
                 &s.update_rule()},
        as_(context_) {}

 private:
  ReplicaContext context_;
  AsReplica as_;
};

}  // namespace tandem::distribute
