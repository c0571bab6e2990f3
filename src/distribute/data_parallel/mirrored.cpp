// MirroredStrategy: its replicas on ReplicaThreads (replica_threads.h), the cross-device group
// they reduce in, its split and reduction policy.
#include <algorithm>
#include <vector>

#include "distribute/replica_threads.h"
#include "tandem/distribute/strategy.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

void MirroredStrategy::split_batch(int64_t rows, BatchSplit& split) const {
  split.even(rows, options_.deterministic ? options_.micro_batches : replicas_, replicas_);
}

GradientReduction MirroredStrategy::gradient_reduction() const {
  using Kind = GradientReduction::Kind;
  if (options_.deterministic) return {Kind::Ordered};
  if (options_.bucket_bytes > 0)
    return {Kind::Bucketed, options_.bucket_bytes, options_.cycle_time, options_.compression};
  return {.kind = Kind::Grouped, .compression = options_.compression};
}

std::vector<std::unique_ptr<Communicator>> MirroredStrategy::make_cross_device_ops() const {
  if (!options_.cross_device_ops) return make_in_process_communicators(replicas_);
  std::vector<std::unique_ptr<Communicator>> handles = options_.cross_device_ops(replicas_);
  if (static_cast<int>(handles.size()) != replicas_)
    fail("MirroredStrategy: cross_device_ops made {} handles for {} replicas", handles.size(), replicas_);
  // Handle r is rank first + r of the group; a group over several processes (multiworker) has
  // every process's replicas, this one's from `first`.
  int first = handles[0] ? handles[0]->rank() : 0, size = handles[0] ? handles[0]->size() : replicas_;
  if (size % replicas_ != 0 || first % replicas_ != 0) first = 0, size = replicas_;
  for (int r = 0; r < replicas_; ++r) {
    const Communicator* c = handles[static_cast<size_t>(r)].get();
    if (c == nullptr || c->size() != size || c->rank() != first + r)
      fail("MirroredStrategy: cross_device_ops handle {} is {}, expected rank {} of {}", r,
           c ? fmt::format("rank {} of {}", c->rank(), c->size()) : "null", first + r, size);
  }
  return handles;
}

MirroredStrategy::MirroredStrategy(MirroredOptions options) : options_(std::move(options)) {
  int num_replicas = options_.num_replicas, threads_per_replica = options_.threads_per_replica;
  int cores = usable_cores();
  if (num_replicas < 0 || num_replicas > kMaxThreads)
    fail("MirroredStrategy: num_replicas must be from 1 to {} (or 0 for one per usable core), got {}", kMaxThreads,
         num_replicas);
  if (threads_per_replica < 0 || threads_per_replica > kMaxThreads)
    fail("MirroredStrategy: threads_per_replica must be from 1 to {} (or 0 for the usable cores shared out), got {}",
         kMaxThreads, threads_per_replica);
  replicas_ = num_replicas > 0 ? num_replicas : cores;
  if (options_.deterministic && options_.compression != Compression::None)
    fail(
        "MirroredStrategy: deterministic mode gathers every part's gradients in float32; compression ({}) is not "
        "available with it",
        compression_name(options_.compression));
  if (options_.cycle_time.count() < 0)
    fail("MirroredStrategy: cycle_time must be 0 or positive, got {} us", options_.cycle_time.count());
  if (options_.bucket_bytes < 0)
    fail("MirroredStrategy: bucket_bytes must be 0 or positive, got {}", options_.bucket_bytes);
  if (options_.deterministic && (options_.micro_batches < replicas_))
    fail(
        "MirroredStrategy: deterministic mode needs at least one micro-batch per replica: micro_batches {} < {} "
        "replicas",
        options_.micro_batches, replicas_);
  threads_per_replica_ = threads_per_replica > 0 ? threads_per_replica : std::max(1, cores / replicas_);
  threads_ = std::make_unique<ReplicaThreads>(
      *this, replicas_, threads_per_replica_, options_.pin_threads, [this] { return make_cross_device_ops(); },
      "MirroredStrategy");
}

MirroredStrategy::~MirroredStrategy() = default;

Communicator& MirroredStrategy::communicator(int replica) { return threads_->communicator(replica); }

std::string MirroredStrategy::name() const {
  return fmt::format("mirrored:{}{}", replicas_, options_.deterministic ? ":deterministic" : "");
}

void MirroredStrategy::for_each_replica(const std::function<void(int replica)>& fn) { threads_->run(fn); }
std::vector<int64_t> MirroredStrategy::replica_runs() const { return threads_->runs(); }

}  // namespace tandem::distribute
