#pragma once
// MultiWorkerMirroredStrategy (tf.distribute's): one worker per process, on one machine or many,
// started together by an MPI launcher (`tandem launch -np N -- ...`, mpirun, srun). Started with
// neither a launcher nor TF_CONFIG, the process is the one worker (as TensorFlow without a
// cluster), its local_replicas on this machine's cores; with TF_CONFIG but no launcher, it is
// refused, saying how to launch. Each worker
// holds local_replicas replicas (threads, as MirroredStrategy); a step's gradients are summed
// among them, all-reduced across the workers over MPI, and handed back (hierarchical). The batch
// given to fit is the global batch: worker w's replicas compute rows [B·g/R, B·(g+1)/R) for their
// replica numbers g = w·local + r of R = workers × local (DATA sharding: every worker runs the
// same input pipeline and takes its rows). Worker 0 is the chief: it alone writes checkpoints,
// logs and reports; every worker restores.
//
// deterministic = true: the global batch is cut into micro_batches fixed parts whose gradients
// are gathered and summed in part order, so the weights' bits do not depend on the number of
// workers or replicas (up to micro_batches of them).
//
// Failures end every worker within `timeout` with an Error naming the rank and host (a process
// that died, stopped, is stuck, or disagrees: see tandem/collectives/mpi.h); on_failure runs first.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "tandem/distribute/strategy.h"
#include "tandem/distribute/strategy_registry.h"

namespace tandem::distribute {

struct MultiWorkerOptions {
  int num_workers = 0;          // expected workers (0: as many as were launched); checked
  int local_replicas = 1;       // replicas (threads) per worker
  int threads_per_replica = 0;  // 0: the machine's usable cores ÷ (its workers × local replicas), at least 1
  bool deterministic = false;
  int micro_batches = 8;
  // All-reduce gradients in buckets of this many bytes while backward goes on (on the MPI
  // communicator's thread); 0: one all-reduce after backward, on the training thread. With
  // workers on one 2-core machine, where the cores are all busy computing, the two measured
  // alike; across machines the overlap hides the network's time.
  int64_t bucket_bytes = 0;
  std::chrono::microseconds cycle_time{0};      // see MirroredOptions
  Compression compression = Compression::None;  // gradients on the wire
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  std::function<void(const std::string&)> on_failure;
  // Workers on several machines: refused unless the network is trusted (MpiOptions::insecure).
  bool insecure = false;
  // ZeRO stage 1 (multiworker:N:zero): each worker keeps and updates the optimizer's slots for its
  // 1/N of every variable; gradients are reduce-scattered and the updated pieces all-gathered in
  // buckets of zero_bucket_bytes instead of all-reduced (with deterministic mode, summed as
  // there, then the update sharded). One replica per worker. Checkpoints stay whole: every
  // worker takes part in gathering the slots (StrategyExtended::collects_state_together).
  bool zero = false;
  int64_t zero_bucket_bytes = int64_t{4} << 20;
  // The workers' group, one handle per process; null: the MPI world (this process must have been
  // started by a launcher).
  std::shared_ptr<Communicator> workers;
};

class ShardedUpdate;

class MultiWorkerExtended : public StrategyExtended {
 public:
  explicit MultiWorkerExtended(MultiWorkerOptions options = {});
  ~MultiWorkerExtended() override;
  std::string name() const override;
  int num_replicas_in_sync() const override { return workers_->size() * local_; }
  int num_local_replicas() const override { return local_; }
  int first_local_replica() const override { return workers_->rank() * local_; }
  Communicator* worker_communicator() override { return workers_.get(); }
  bool is_chief() const override { return workers_->rank() == 0; }
  void for_each_replica(const std::function<void(int replica)>& fn) override;
  void split_batch(int64_t rows, BatchSplit& split) const override;
  void set_timeline(Timeline* timeline) override;
  GradientReduction gradient_reduction() const override;
  UpdateRule& update_rule() const override;
  bool collects_state_together() const override { return mw_.zero; }
  void collect_state(std::vector<std::pair<std::string, Tensor>>& state) override;
  // ZeRO: the bytes of optimizer slots this worker holds (0 before the first update, or without zero).
  int64_t optimizer_slot_bytes() const;
  int worker() const { return workers_->rank(); }
  int num_workers() const { return workers_->size(); }

 private:
  MultiWorkerExtended(MultiWorkerOptions options, std::shared_ptr<Communicator> workers);
  std::shared_ptr<Communicator> workers_;
  MultiWorkerOptions mw_;
  std::unique_ptr<MirroredReplicas> replicas_;  // this worker's replicas, reducing through workers_
  std::unique_ptr<ShardedUpdate> sharded_;      // with zero
  int local_;
  int64_t steps_ = 0;
  // Test hook, TANDEM_TEST_FAULT=hang:RANK:STEP or kill:RANK:STEP: worker RANK hangs (its control
  // connection beating) or kills itself with SIGKILL as it starts step STEP (0-based, this run's).
  int64_t fault_at_ = -1;
  bool fault_kill_ = false;
};

class MultiWorkerMirroredStrategy : public StrategyOf<MultiWorkerExtended> {
 public:
  explicit MultiWorkerMirroredStrategy(MultiWorkerOptions options = {})
      : StrategyOf(std::make_unique<MultiWorkerExtended>(std::move(options))) {}
};

// The strategy from its options (strategy_registry.h's make_* say what these add).
std::unique_ptr<Strategy> make_multiworker(MultiWorkerOptions options, const StrategySettings& settings);

}  // namespace tandem::distribute
