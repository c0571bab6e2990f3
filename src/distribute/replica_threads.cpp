// The replicas' threads (replica_threads.h).
#include "distribute/replica_threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/cpu_budget.h"
#include "distribute/running_as.h"
#include "tandem/autograd.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

struct ReplicaThreads::Workers {
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

ReplicaThreads::ReplicaThreads(StrategyExtended& owner, int replicas, int threads_per_replica, bool pin,
                               const MakeGroup& make_group, std::string who)
    : owner_(owner),
      replicas_(replicas),
      threads_per_replica_(threads_per_replica),
      make_group_(make_group),
      runs_(static_cast<size_t>(replicas), 0),
      group_(make_group()),
      workers_(std::make_unique<Workers>()) {
  workers_->errors.resize(static_cast<size_t>(replicas_));
  workers_->busy_threads = replicas_ * threads_per_replica_;
  // The CPUs of the affinity mask (a launcher's binding is kept), in order.
  std::vector<int> cpus;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  pin = pin && !cpus.empty() && workers_->busy_threads <= static_cast<int>(cpus.size()) &&
        workers_->busy_threads <= usable_cores();
  for (int r = 1; r < replicas_; ++r) {
    try {
      start_thread(r, pin, cpus);
    } catch (const std::system_error& e) {  // out of threads: stop the ones started, then say so
      stop();
      fail("{}: could not start the thread of replica {} of {}: {}", who, r, replicas_, e.what());
    }
  }
}

void ReplicaThreads::start_thread(int r, bool pin, const std::vector<int>& cpus) {
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

void ReplicaThreads::run_replica(int r, const std::function<void(int)>& job) {
  try {
    RunningAs as(owner_, r);
    job(r);
    ++runs_[static_cast<size_t>(r)];
  } catch (...) {
    workers_->errors[static_cast<size_t>(r)] = std::current_exception();
    std::string what = "an exception";
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    group_[static_cast<size_t>(r)]->abort(what);
  }
}

void ReplicaThreads::stop() {
  {
    std::lock_guard lock(workers_->mutex);
    workers_->stopping.store(true, std::memory_order_release);
  }
  workers_->wake.notify_all();
  for (auto& t : workers_->threads) t.join();
  workers_->threads.clear();
}

ReplicaThreads::~ReplicaThreads() { stop(); }

void ReplicaThreads::run(const std::function<void(int replica)>& fn) {
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
      group_ = make_group_();  // the aborted one is spent
      std::rethrow_exception(first);
    }
}

int threads_per_device(const std::string& who, int devices, const char* field, int threads) {
  if (devices < 1 || devices > kMaxThreads)
    fail("{}: {} devices on this process; at most {} threads may run replicas", who, devices, kMaxThreads);
  if (threads < 0 || threads > kMaxThreads)
    fail("{}: {} must be from 1 to {} (or 0 for the usable cores shared out), got {}", who, field, kMaxThreads,
         threads);
  return threads > 0 ? threads : std::max(1, usable_cores() / devices);
}

}  // namespace tandem::distribute
