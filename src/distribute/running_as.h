#pragma once
// A thread running as one replica of a strategy: its replica context, which carries the
// strategy's update rule, set while alive (strategies set it on each replica's thread).
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

// Runs as replica r of s while alive.
class RunningAs {
 public:
  RunningAs(Strategy* s, int r)
      : context_{s,
                 &s->extended().communicator(r),
                 s->extended().first_local_replica() + r,
                 s->num_replicas_in_sync(),
                 s->extended().first_row(r),
                 r,
                 s->extended().num_local_replicas(),
                 s->extended().batch_group(r),
                 &s->extended().update_rule()},
        as_(context_) {}

 private:
  ReplicaContext context_;
  AsReplica as_;
};

}  // namespace tandem::distribute
