#pragma once
// The replica this thread runs as (tf.distribute.get_replica_context()). A strategy sets it while
// a replica's step runs; what acts across replicas below the strategies reads it: optimizers hand
// their gradients to its update route, synchronized batch normalization sums its statistics. It
// is the one piece of wiring carried by the thread (as TensorFlow's replica context is), because
// a Keras-style step function calls the optimizer and the layers without naming the replica.
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/collectives/communicator.h"
#include "tandem/tensor.h"

namespace tandem {
class UpdateRoute;  // tandem/optimizers.h
}

namespace tandem::distribute {

class Strategy;  // carried for the layers above; never used below the strategies

struct ReplicaContext {
  Strategy* strategy = nullptr;          // the strategy running this replica
  Communicator* communicator = nullptr;  // among the replicas in sync
  int replica_id = 0;                    // among all replicas in sync
  int num_replicas = 1;
  // This replica's first row in the global batch, when the strategy was given the batch split
  // (Strategy::run with a distributed dataset's batch); -1 when unknown.
  int64_t first_row = -1;
  int local_replica_id = 0;  // among the replicas of this process
  int num_local_replicas = 1;
  // The group the global batch is split over (data parallelism): what sums over the batch's rows
  // (batch normalization's statistics, the loss's global batch size) sums over it. Null where
  // every replica computes the whole batch (model parallelism's devices).
  Communicator* batch_group = nullptr;
  // Where Optimizer::apply sends this replica's gradients (the strategy's update rule); null: the
  // optimizer updates here.
  UpdateRoute* update_route = nullptr;

  int num_replicas_in_sync() const { return num_replicas; }
  // Each tensor reduced over the replicas, fused into one collective; every replica calls it
  // with the same shapes and gets the same bits.
  std::vector<Tensor> all_reduce(ReduceOp op, std::span<const Tensor> values) const;
};

// The context of the replica this thread is running as, or null outside Strategy::run.
const ReplicaContext* replica_context();

// While alive, this thread runs as `context` (which must outlive it); the previous one comes back after.
class AsReplica {
 public:
  explicit AsReplica(const ReplicaContext& context);
  ~AsReplica();
  AsReplica(const AsReplica&) = delete;
  AsReplica& operator=(const AsReplica&) = delete;

 private:
  const ReplicaContext* saved_;
};

}  // namespace tandem::distribute
