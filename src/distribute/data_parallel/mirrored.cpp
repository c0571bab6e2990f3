// MirroredStrategy's replicas: the calling thread and persistent pinned threads, each with its
// own intra-op thread count, started once per step; its split and reduction policy.
#include "distribute/running_as.h"
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
