// MirroredStrategy, CentralStorageStrategy and LocalSgdStrategy, and the part they (and
// MultiWorkerMirroredStrategy) hold: MirroredReplicas, their replicas on ReplicaThreads
// (replica_threads.h), the cross-device group they reduce in, their split and reduction policy.
#include <algorithm>
#include <vector>

#include "distribute/data_parallel/mirrored_replicas.h"
#include "distribute/update_rules.h"
#include "tandem/devices.h"
#include "tandem/distribute/local_sgd.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

void MirroredReplicas::split_batch(int64_t rows, BatchSplit& split, int in_sync) const {
  if (in_sync == 0) in_sync = count();
  split.even(rows, options_.deterministic ? options_.micro_batches : in_sync, in_sync);
}

std::string MirroredReplicas::name(const char* family, int in_sync) const {
  return fmt::format("{}:{}{}", family, in_sync, options_.deterministic ? ":deterministic" : "");
}

GradientReduction MirroredReplicas::gradient_reduction() const {
  using Kind = GradientReduction::Kind;
  if (options_.deterministic) return {Kind::Ordered};
  if (options_.bucket_bytes > 0)
    return {Kind::Bucketed, options_.bucket_bytes, options_.cycle_time, options_.compression};
  return {.kind = Kind::Grouped, .compression = options_.compression};
}

std::vector<std::unique_ptr<Communicator>> MirroredReplicas::make_cross_device_ops(int replicas,
                                                                                   const char* who) const {
  if (!options_.cross_device_ops) return make_in_process_communicators(replicas);
  std::vector<std::unique_ptr<Communicator>> handles = options_.cross_device_ops(replicas);
  if (static_cast<int>(handles.size()) != replicas)
    fail("{}: cross_device_ops made {} handles for {} replicas", who, handles.size(), replicas);
  // Handle r is rank first + r of the group; a group over several processes (multiworker) has
  // every process's replicas, this one's from `first`.
  int first = handles[0] ? handles[0]->rank() : 0, size = handles[0] ? handles[0]->size() : replicas;
  if (size % replicas != 0 || first % replicas != 0) first = 0, size = replicas;
  for (int r = 0; r < replicas; ++r) {
    const Communicator* c = handles[static_cast<size_t>(r)].get();
    if (c == nullptr || c->size() != size || c->rank() != first + r)
      fail("{}: cross_device_ops handle {} is {}, expected rank {} of {}", who, r,
           c ? fmt::format("rank {} of {}", c->rank(), c->size()) : "null", first + r, size);
  }
  return handles;
}

MirroredReplicas::MirroredReplicas(StrategyExtended& owner, MirroredOptions options, const char* who)
    : options_(std::move(options)) {
  int num_replicas = options_.num_replicas, threads_per_replica = options_.threads_per_replica;
  int cores = usable_cores();
  if (num_replicas < 0 || num_replicas > kMaxThreads)
    fail("{}: num_replicas must be from 1 to {} (or 0 for one per usable core), got {}", who, kMaxThreads,
         num_replicas);
  if (threads_per_replica < 0 || threads_per_replica > kMaxThreads)
    fail("{}: threads_per_replica must be from 1 to {} (or 0 for the usable cores shared out), got {}", who,
         kMaxThreads, threads_per_replica);
  const std::vector<Device>& devices = options_.devices;
  if (!devices.empty() && num_replicas != 0 && num_replicas != static_cast<int>(devices.size()))
    fail("{}: num_replicas is {} but {} devices were given ({}...); give one or the other", who, num_replicas,
         devices.size(), devices[0].name());
  if (static_cast<int>(devices.size()) > kMaxThreads)
    fail("{}: {} devices, at most {} replicas", who, devices.size(), kMaxThreads);
  for (size_t r = 0; r < devices.size(); ++r) {
    check_device(devices[r], who);
    for (size_t q = 0; q < r; ++q)
      if (devices[q] == devices[r])
        fail("{}: device {} is given twice (replicas {} and {}); each replica needs a device of its own", who,
             devices[r].name(), q, r);
  }
  int replicas = !devices.empty() ? static_cast<int>(devices.size()) : num_replicas > 0 ? num_replicas : cores;
  if (options_.deterministic && options_.compression != Compression::None)
    fail("{}: deterministic mode gathers every part's gradients in float32; compression ({}) is not available with it",
         who, compression_name(options_.compression));
  if (options_.cycle_time.count() < 0)
    fail("{}: cycle_time must be 0 or positive, got {} us", who, options_.cycle_time.count());
  if (options_.bucket_bytes < 0) fail("{}: bucket_bytes must be 0 or positive, got {}", who, options_.bucket_bytes);
  if (options_.deterministic && (options_.micro_batches < replicas))
    fail("{}: deterministic mode needs at least one micro-batch per replica: micro_batches {} < {} replicas", who,
         options_.micro_batches, replicas);
  int threads = threads_per_replica > 0 ? threads_per_replica : std::max(1, cores / replicas);
  threads_ = std::make_unique<ReplicaThreads>(
      owner, replicas, threads, options_.pin_threads,
      [this, replicas, who] { return make_cross_device_ops(replicas, who); }, who);
}

MirroredExtended::MirroredExtended(MirroredOptions options)
    : replicas_(std::make_unique<MirroredReplicas>(*this, std::move(options), "MirroredStrategy")) {
  run_replicas_on(replicas_->threads());
}
MirroredExtended::~MirroredExtended() = default;
std::string MirroredExtended::name() const { return replicas_->name("mirrored", replicas_->count()); }
int MirroredExtended::num_replicas_in_sync() const { return replicas_->count(); }
void MirroredExtended::split_batch(int64_t rows, BatchSplit& split) const { replicas_->split_batch(rows, split); }
GradientReduction MirroredExtended::gradient_reduction() const { return replicas_->gradient_reduction(); }
std::vector<Device> MirroredExtended::replica_devices() const { return replicas_->options().devices; }

CentralStorageExtended::CentralStorageExtended(MirroredOptions options)
    : replicas_(std::make_unique<MirroredReplicas>(*this, std::move(options), "CentralStorageStrategy")) {
  if (!replicas_->options().devices.empty())
    fail(
        "CentralStorageStrategy: devices ({}...) are not taken: its variables live once on the host and its replicas "
        "compute there; MirroredStrategy runs a replica per device",
        replicas_->options().devices[0].name());
  run_replicas_on(replicas_->threads());
}
CentralStorageExtended::~CentralStorageExtended() = default;
std::string CentralStorageExtended::name() const { return replicas_->name("central", replicas_->count()); }
int CentralStorageExtended::num_replicas_in_sync() const { return replicas_->count(); }
void CentralStorageExtended::split_batch(int64_t rows, BatchSplit& split) const { replicas_->split_batch(rows, split); }
GradientReduction CentralStorageExtended::gradient_reduction() const { return replicas_->gradient_reduction(); }

// The trainable variables shared; each replica updates its own copy of the moving statistics
// (to the same values, from the replicas' common statistics).
std::shared_ptr<layers::Layer> CentralStorageExtended::replica_layer(const layers::Layer& layer, int) const {
  std::shared_ptr<layers::Layer> copy = layer.clone();
  for (Variable& v : copy->variables())
    if (!v.trainable) v.value = v.value.clone();
  return copy;
}
UpdateRule& CentralStorageExtended::update_rule() const { return central_update_rule(); }

LocalSgdExtended::LocalSgdExtended(LocalSgdOptions options)
    : rule_(check(options.sync_every)),
      replicas_(std::make_unique<MirroredReplicas>(
          *this,
          MirroredOptions{.num_replicas = options.num_replicas, .threads_per_replica = options.threads_per_replica},
          "LocalSgdStrategy")) {
  run_replicas_on(replicas_->threads());
}
LocalSgdExtended::~LocalSgdExtended() = default;
int LocalSgdExtended::num_replicas_in_sync() const { return replicas_->count(); }

}  // namespace tandem::distribute
