// Strategy scopes and MirroredStrategy's replicas: the calling thread and persistent pinned
// threads, each with its own intra-op thread count, started once per step.
#include "tandem/distribute/strategy.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "core/cpu_budget.h"
#include "distribute/gradient_reducer.h"
#include "tandem/autograd.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {
namespace {
thread_local Strategy* scope_strategy = nullptr;
// Runs as replica r of s while alive.
class RunningAs {
 public:
  RunningAs(Strategy* s, int r)
      : context_{s, &s->communicator(r),    s->first_local_replica() + r, s->num_replicas_in_sync(), s->first_row(r),
                 r, s->num_local_replicas()},
        as_(context_),
        rule_(&s->update_rule()) {}

 private:
  ReplicaContext context_;
  AsReplica as_;
  UsingUpdateRule rule_;
};
// Mirrored variables: the gradients reduced over the replicas by the strategy's policy (custom
// loops; fit's step reduces them itself), then every replica updates its own copy of the
// variables with its own copy of the slots.
class MirroredUpdate : public UpdateRule {
 public:
  void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) override {
    const ReplicaContext* replica = replica_context();
    if (replica->num_replicas == 1) return optimizer.apply_here(variables, gradients);
    apply_reduced(optimizer, variables,
                  reduce_replica_gradients(*replica, replica->strategy->gradient_reduction(), gradients));
  }
  void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                     std::span<const Tensor> reduced) override {
    optimizer.for_replica(*replica_context(), variables).apply_here(variables, reduced);
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

}  // namespace

std::shared_ptr<layers::Layer> Strategy::replica_layer(const layers::Layer& layer, int) const {
  return layer.replicate();
}

UpdateRule& Strategy::update_rule() const {
  static MirroredUpdate rule;
  return rule;
}

// The trainable variables shared; each replica updates its own copy of the moving statistics
// (to the same values, from the replicas' common statistics).
std::shared_ptr<layers::Layer> CentralStorageStrategy::replica_layer(const layers::Layer& layer, int) const {
  std::shared_ptr<layers::Layer> copy = layer.clone();
  for (Variable& v : copy->variables())
    if (!v.trainable) v.value = v.value.clone();
  return copy;
}

UpdateRule& CentralStorageStrategy::update_rule() const {
  static CentralUpdate rule;
  return rule;
}

void BatchSplit::even(int64_t rows, int parts, int replicas) {
  row.resize(static_cast<size_t>(parts) + 1);
  for (int p = 0; p <= parts; ++p) row[static_cast<size_t>(p)] = rows * p / parts;
  first_part.resize(static_cast<size_t>(replicas) + 1);
  for (int r = 0; r <= replicas; ++r) first_part[static_cast<size_t>(r)] = parts * r / replicas;
}

void Strategy::split_batch(int64_t rows, BatchSplit& split) const {
  split.even(rows, num_replicas_in_sync(), num_replicas_in_sync());
}

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

Strategy::Scope::Scope(Strategy* s) : previous_(scope_strategy) { scope_strategy = s; }
Strategy::Scope::~Scope() { scope_strategy = previous_; }
Strategy* current_strategy() { return scope_strategy; }
Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& values) {
  check_per_replica(values.size(), "reduce");
  const Shape& shape = values[0].shape();
  Tensor out = Tensor::empty(shape);
  float* o = out.data<float>();
  for (int r = 0; r < values.size(); ++r) {
    if (!(values[r].shape() == shape) || values[r].dtype() != DType::Float32)
      fail("reduce: replica {} has a {} tensor of shape {}, replica 0 float32 of shape {}", r,
           dtype_name(values[r].dtype()), values[r].shape().str(), shape.str());
    Tensor c = values[r].to(Device::cpu()).contiguous();  // reduced on the host
    const float* v = c.data<float>();
    for (int64_t i = 0, n = c.numel(); i < n; ++i)
      o[i] = r == 0                ? v[i]
             : op == ReduceOp::Min ? std::min(o[i], v[i])
             : op == ReduceOp::Max ? std::max(o[i], v[i])
                                   : o[i] + v[i];
  }
  // Over several processes, every worker's replicas (each worker passes the same shape).
  Communicator* workers = worker_communicator();
  if (workers != nullptr && workers->size() > 1)
    workers->all_reduce(o, out.numel(), DataType::Float32, op == ReduceOp::Mean ? ReduceOp::Sum : op);
  if (op == ReduceOp::Mean)
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] /= static_cast<float>(num_replicas_in_sync());
  return out;
}

Tensor Strategy::gather(const PerReplica<Tensor>& values, int axis) {
  check_per_replica(values.size(), "gather");
  const Tensor& first = values[0];
  int rank = first.rank();
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) fail("gather: axis {} out of range for rank {}", axis, rank);
  Shape shape = first.shape();
  shape[axis] = 0;
  for (int r = 0; r < values.size(); ++r) {
    const Tensor& t = values[r];
    bool same = t.rank() == rank && t.dtype() == first.dtype();
    for (int d = 0; same && d < rank; ++d) same = d == axis || t.dim(d) == first.dim(d);
    if (!same)
      fail("gather: replica {} has a {} tensor of shape {}, which does not stack with replica 0's {} along axis {}", r,
           dtype_name(t.dtype()), t.shape().str(), first.shape().str(), axis);
    shape[axis] += t.dim(axis);
  }
  Tensor out = Tensor::empty(shape, first.dtype());
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(first.dtype()));
  for (int d = 0; d < axis; ++d) outer *= first.dim(d);
  for (int d = axis + 1; d < rank; ++d) inner *= first.dim(d);
  auto* dst = static_cast<char*>(out.raw());
  int64_t row = shape[axis] * inner, offset = 0;
  for (int r = 0; r < values.size(); ++r) {
    Tensor c = values[r].to(Device::cpu()).contiguous();
    int64_t block = c.dim(axis) * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * row + offset, static_cast<const char*>(c.raw()) + o * block, static_cast<size_t>(block));
    offset += block;
  }
  return out;
}

std::optional<PerReplica<data::Element>> DistributedDataset::Iterator::next() {
  std::optional<data::Element> batch = it_->next();
  if (!batch) return std::nullopt;
  PerReplica<data::Element> out;
  if (!batch->empty() && (*batch)[0].rank() >= 1) out.first_row = (*batch)[0].dim(0) * first_ / replicas_;
  for (int r = first_; r < first_ + local_; ++r) {
    data::Element part;
    for (const Tensor& t : *batch) {
      if (t.rank() < 1)
        fail("distribute_dataset: element component of shape {} has no batch axis to split", t.shape().str());
      int64_t rows = t.dim(0);
      part.push_back(t.slice(rows * r / replicas_, rows * (r + 1) / replicas_));
    }
    out.values.push_back(std::move(part));
  }
  return out;
}

OneDeviceStrategy::OneDeviceStrategy() : comm_(make_in_process_communicators(1)) {}

void OneDeviceStrategy::for_each_replica(const std::function<void(int replica)>& fn) {
  RunningAs as(this, 0);
  fn(0);
}

// Replica 0 runs on the calling thread; replicas 1.. on threads of their own, pinned to cores of
// the process's affinity mask while there are enough. A step's hand-offs (start, finish) are an
// atomic generation and counter: while every replica's cores are free, the waiting side spins a
// short while before sleeping, since a sleep and wake costs system calls and, on a virtual
// machine, a halted core's wake-up; when they are not (more replicas than cores, other busy
// processes), it sleeps at once, leaving the core to the thread it waits for.
struct MirroredStrategy::Workers {
  std::mutex mutex;
  std::condition_variable wake, done;
  const std::function<void(int)>* job = nullptr;  // published by the generation's release
  std::atomic<uint64_t> generation{0};
  std::atomic<int> finished{0};
  std::atomic<bool> stopping{false};
  int busy_threads = 1;  // replicas × threads per replica: the cores a step keeps busy
  std::vector<std::exception_ptr> errors;
  std::vector<std::thread> threads;

  // Spins while `ready()` is false, as long as core::spin_allowance allows; true once it holds.
  template <class Ready>
  bool spin_until(const Ready& ready) const {
    return core::spin_until(core::spin_allowance(busy_threads), ready);
  }
};

void MirroredStrategy::run_replica(int r, const std::function<void(int)>& job) {
  try {
    RunningAs as(this, r);
    job(r);
  } catch (...) {
    workers_->errors[static_cast<size_t>(r)] = std::current_exception();
    std::string what = "an exception";
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    comm_[static_cast<size_t>(r)]->abort(what);
  }
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
  comm_ = make_cross_device_ops();
  workers_ = std::make_unique<Workers>();
  workers_->errors.resize(static_cast<size_t>(replicas_));
  workers_->busy_threads = replicas_ * threads_per_replica_;
  // The CPUs of the affinity mask (a launcher's binding is kept), in order.
  std::vector<int> cpus;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  bool pin = options_.pin_threads && !cpus.empty() && workers_->busy_threads <= static_cast<int>(cpus.size()) &&
             workers_->busy_threads <= cores;
  for (int r = 1; r < replicas_; ++r) {
    try {
      start_replica_thread(r, pin, cpus);
    } catch (const std::system_error& e) {  // out of threads: stop the ones started, then say so
      stop_workers();
      fail("MirroredStrategy: could not start the thread of replica {} of {}: {}", r, replicas_, e.what());
    }
  }
}

void MirroredStrategy::start_replica_thread(int r, bool pin, const std::vector<int>& cpus) {
  {
    workers_->threads.emplace_back([this, r, pin, cpus] {
      if (pin) {  // replica r on its own cores of the mask
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = 0; c < threads_per_replica_; ++c)
          CPU_SET(cpus[static_cast<size_t>(r * threads_per_replica_ + c)], &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      }
      set_num_threads(threads_per_replica_);
      Workers& w = *workers_;
      uint64_t seen = 0;
      for (;;) {
        auto started = [&] {
          return w.stopping.load(std::memory_order_acquire) || w.generation.load(std::memory_order_acquire) != seen;
        };
        if (!w.spin_until(started)) {
          std::unique_lock lock(w.mutex);
          w.wake.wait(lock, started);
        }
        if (w.stopping.load(std::memory_order_acquire)) return;
        seen = w.generation.load(std::memory_order_acquire);
        run_replica(r, *w.job);
        if (w.finished.fetch_add(1, std::memory_order_acq_rel) + 1 == replicas_ - 1) {
          std::lock_guard lock(w.mutex);  // a caller about to sleep has either seen the count or waits
          w.done.notify_all();
        }
      }
    });
  }
}

void MirroredStrategy::stop_workers() {
  {
    std::lock_guard lock(workers_->mutex);
    workers_->stopping.store(true, std::memory_order_release);
  }
  workers_->wake.notify_all();
  for (auto& t : workers_->threads) t.join();
  workers_->threads.clear();
}

MirroredStrategy::~MirroredStrategy() { stop_workers(); }

std::string MirroredStrategy::name() const {
  return fmt::format("mirrored:{}{}", replicas_, options_.deterministic ? ":deterministic" : "");
}
std::string CentralStorageStrategy::name() const {
  return fmt::format("central:{}{}", num_replicas_in_sync(), options().deterministic ? ":deterministic" : "");
}

void MirroredStrategy::for_each_replica(const std::function<void(int replica)>& fn) {
  Workers& w = *workers_;
  for (auto& e : w.errors) e = nullptr;
  w.job = &fn;
  w.finished.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lock(w.mutex);  // a worker about to sleep has either seen the generation or waits
    w.generation.fetch_add(1, std::memory_order_acq_rel);
  }
  w.wake.notify_all();
  {
    int saved_threads = num_threads_setting();
    set_num_threads(threads_per_replica_);
    StopRecording fresh;  // as on the other replicas' threads: no tape of the caller's records
    run_replica(0, fn);
    set_num_threads(saved_threads);
  }
  auto all_done = [&] { return w.finished.load(std::memory_order_acquire) == replicas_ - 1; };
  if (!w.spin_until(all_done)) {
    std::unique_lock lock(w.mutex);
    w.done.wait(lock, all_done);
  }
  // The replica whose own code failed comes first; the others only saw the abort.
  for (auto& e : w.errors)
    if (e) {
      std::exception_ptr first = e;
      comm_ = make_cross_device_ops();  // the aborted one is spent
      std::rethrow_exception(first);
    }
}

}  // namespace tandem::distribute
