// MultiWorkerMirroredStrategy (tandem/distribute/multi_worker.h): a MirroredStrategy over this
// process's replicas whose communicators reach every process's (make_hierarchical_communicators).
#include "tandem/distribute/multi_worker.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <tuple>

#include "core/fault_hooks.h"
#include "distribute/data_parallel/mirrored_replicas.h"
#include "distribute/data_parallel/sharded_update.h"
#include "tandem/collectives/mpi.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {
namespace {

std::shared_ptr<Communicator> world(const MultiWorkerOptions& o) {
  if (o.workers) return o.workers;
  bool launched = started_by_mpi_launcher();
  if (!launched && std::getenv("TF_CONFIG") == nullptr) {
    // No launcher and no cluster: as TensorFlow, this process is the one worker.
    std::fprintf(stderr,
                 "MultiWorkerMirroredStrategy: no launcher and no TF_CONFIG, so this process is the only worker "
                 "(`tandem launch -np N -- <this command>` starts N)\n");
    return std::shared_ptr<Communicator>(make_in_process_communicators(1, o.timeout)[0].release());
  }
  if (!mpi_built()) fail("MultiWorkerMirroredStrategy: this Tandem was built without MPI (install libopenmpi-dev)");
  if (!launched)
    fail(
        "MultiWorkerMirroredStrategy: TF_CONFIG names a cluster, but this process was not started by a launcher, so "
        "it cannot reach the other workers. Start every worker at once: `tandem launch -- <this command>` with "
        "TF_CONFIG set, `tandem launch -np 2 -- <this command>` on one machine, or `tandem launch -np 4 -H "
        "host1:2,host2:2 -- <this command>` on several; mpirun and srun work too");
  return make_mpi_world_communicator({.timeout = o.timeout, .on_failure = o.on_failure, .insecure = o.insecure});
}

MirroredOptions mirrored_options(const MultiWorkerOptions& o, const std::shared_ptr<Communicator>& workers) {
  if (o.local_replicas < 1)
    fail("MultiWorkerMirroredStrategy: local_replicas must be at least 1, got {}", o.local_replicas);
  int per_machine = std::max(1, workers->local_size()) * o.local_replicas;
  MirroredOptions m;
  m.num_replicas = o.local_replicas;
  m.threads_per_replica = o.threads_per_replica > 0 ? o.threads_per_replica : std::max(1, usable_cores() / per_machine);
  m.deterministic = o.deterministic;
  m.micro_batches = o.micro_batches;
  m.pin_threads = workers->local_size() <= 1;
  m.bucket_bytes = o.bucket_bytes;
  m.cycle_time = o.cycle_time;
  m.compression = o.compression;
  m.cross_device_ops = [workers, timeout = o.timeout](int local) {
    return make_hierarchical_communicators(workers, local, timeout);
  };
  return m;
}

}  // namespace

MultiWorkerExtended::MultiWorkerExtended(MultiWorkerOptions options) : MultiWorkerExtended(options, world(options)) {}

MultiWorkerExtended::MultiWorkerExtended(MultiWorkerOptions options, std::shared_ptr<Communicator> workers)
    : workers_(std::move(workers)),
      mw_(std::move(options)),
      replicas_(
          std::make_unique<MirroredReplicas>(*this, mirrored_options(mw_, workers_), "MultiWorkerMirroredStrategy")),
      local_(mw_.local_replicas) {
  run_replicas_on(replicas_->threads());
  if (mw_.num_workers > 0 && mw_.num_workers != workers_->size())
    fail("MultiWorkerMirroredStrategy: {} workers were asked for, and {} were launched", mw_.num_workers,
         workers_->size());
  if (mw_.deterministic && mw_.micro_batches < num_replicas_in_sync())
    fail(
        "MultiWorkerMirroredStrategy: deterministic mode needs at least one micro-batch per replica: micro_batches {} "
        "< {} replicas ({} workers × {})",
        mw_.micro_batches, num_replicas_in_sync(), workers_->size(), local_);
  // Every worker the same replicas per worker (the hierarchical reduction needs it).
  int64_t mine = local_, least = local_, most = local_;
  workers_->all_reduce(&least, 1, DataType::Int64, ReduceOp::Min);
  workers_->all_reduce(&most, 1, DataType::Int64, ReduceOp::Max);
  if (least != mine || most != mine)
    fail("MultiWorkerMirroredStrategy: workers disagree on the local replicas ({} to {}; this worker has {})", least,
         most, mine);
  if (mw_.zero) {
    if (local_ != 1)
      fail("MultiWorkerMirroredStrategy: zero keeps one replica per worker, got {} local replicas", local_);
    if (mw_.compression != Compression::None)
      fail("MultiWorkerMirroredStrategy: zero reduce-scatters full-precision gradients; leave compression off");
    sharded_ = std::make_unique<ShardedUpdate>(*workers_, mw_.deterministic, mw_.zero_bucket_bytes);
  }
  if (const fault_hooks::Hooks& hooks = fault_hooks::hooks(); hooks.step_fault)  // the tests' (core/fault_hooks.h)
    std::tie(fault_at_, fault_kill_) = hooks.step_fault(workers_->rank());
}

MultiWorkerExtended::~MultiWorkerExtended() = default;

std::string MultiWorkerExtended::name() const {
  return fmt::format("multiworker:{}{}{}{}", workers_->size(), local_ > 1 ? fmt::format(":{}", local_) : "",
                     mw_.deterministic ? ":deterministic" : "", mw_.zero ? ":zero" : "");
}

GradientReduction MultiWorkerExtended::gradient_reduction() const {
  // ZeRO reduce-scatters in its update rule; deterministic, the step sums in part order first.
  if (mw_.zero && !mw_.deterministic) return {GradientReduction::Kind::None};
  return replicas_->gradient_reduction();
}

UpdateRule& MultiWorkerExtended::update_rule() const { return sharded_ ? *sharded_ : StrategyExtended::update_rule(); }

void MultiWorkerExtended::collect_state(std::vector<std::pair<std::string, Tensor>>& state) {
  if (sharded_) sharded_->complete_state(state);
}

int64_t MultiWorkerExtended::optimizer_slot_bytes() const { return sharded_ ? sharded_->slot_bytes() : 0; }

void MultiWorkerExtended::for_each_replica(const std::function<void(int replica)>& fn) {
  if (steps_++ == fault_at_) {  // the test hook
    if (fault_kill_) raise(SIGKILL);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // alive (the control thread beats), never arriving
  }
  StrategyExtended::for_each_replica(fn);
}

void MultiWorkerExtended::set_timeline(Timeline* timeline) {
  StrategyExtended::set_timeline(timeline);
  workers_->set_timeline(timeline);
}

void MultiWorkerExtended::split_batch(int64_t rows, BatchSplit& split) const {
  replicas_->split_batch(rows, split, num_replicas_in_sync());
}

}  // namespace tandem::distribute
