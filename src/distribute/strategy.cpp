// Strategy scopes and MirroredStrategy's replica threads: persistent, pinned, each with its
// own intra-op thread count, woken once per step.
#include "tandem/distribute/strategy.h"

#include <pthread.h>
#include <sched.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {
namespace {
thread_local Strategy* scope_strategy = nullptr;
}

Strategy::Scope::Scope(Strategy* s) : previous_(scope_strategy) { scope_strategy = s; }
Strategy::Scope::~Scope() { scope_strategy = previous_; }
Strategy* current_strategy() { return scope_strategy; }

OneDeviceStrategy::OneDeviceStrategy() : comm_(make_in_process_communicator(1)) {}

struct MirroredStrategy::Workers {
  std::mutex mutex;
  std::condition_variable wake, done;
  const std::function<void(int)>* job = nullptr;
  uint64_t generation = 0;
  int finished = 0;
  bool stopping = false;
  std::vector<std::exception_ptr> errors;
  std::vector<std::thread> threads;
};

MirroredStrategy::MirroredStrategy(int num_replicas, int threads_per_replica) {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  replicas_ = num_replicas > 0 ? num_replicas : cores;
  if (num_replicas < 0) fail("MirroredStrategy: num_replicas must be positive (or 0 for one per core), got {}", num_replicas);
  if (threads_per_replica < 0) fail("MirroredStrategy: threads_per_replica must be positive (or 0), got {}", threads_per_replica);
  threads_per_replica_ = threads_per_replica > 0 ? threads_per_replica : std::max(1, cores / replicas_);
  comm_ = make_in_process_communicator(replicas_);
  workers_ = std::make_unique<Workers>();
  workers_->errors.resize(static_cast<size_t>(replicas_));
  for (int r = 0; r < replicas_; ++r) {
    workers_->threads.emplace_back([this, r, cores] {
      if (replicas_ <= cores) {  // pin replica r to its own cores
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = 0; c < threads_per_replica_; ++c) CPU_SET((r * threads_per_replica_ + c) % cores, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      }
      set_num_threads(threads_per_replica_);
      Workers& w = *workers_;
      uint64_t seen = 0;
      for (;;) {
        const std::function<void(int)>* job;
        {
          std::unique_lock lock(w.mutex);
          w.wake.wait(lock, [&] { return w.stopping || w.generation != seen; });
          if (w.stopping) return;
          seen = w.generation;
          job = w.job;
        }
        try {
          (*job)(r);
        } catch (...) {
          w.errors[static_cast<size_t>(r)] = std::current_exception();
          std::string what = "an exception";
          try {
            throw;
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          comm_->abort(r, what);
        }
        std::lock_guard lock(w.mutex);
        if (++w.finished == replicas_) w.done.notify_all();
      }
    });
  }
}

MirroredStrategy::~MirroredStrategy() {
  {
    std::lock_guard lock(workers_->mutex);
    workers_->stopping = true;
  }
  workers_->wake.notify_all();
  for (auto& t : workers_->threads) t.join();
}

std::string MirroredStrategy::name() const { return fmt::format("mirrored:{}", replicas_); }
std::string CentralStorageStrategy::name() const { return fmt::format("central:{}", num_replicas_in_sync()); }

void MirroredStrategy::run(const std::function<void(int replica)>& fn) {
  Workers& w = *workers_;
  {
    std::lock_guard lock(w.mutex);
    w.job = &fn;
    w.finished = 0;
    for (auto& e : w.errors) e = nullptr;
    ++w.generation;
  }
  w.wake.notify_all();
  std::unique_lock lock(w.mutex);
  w.done.wait(lock, [&] { return w.finished == replicas_; });
  // The replica whose own code failed comes first; the others only saw the abort.
  for (auto& e : w.errors)
    if (e) {
      std::exception_ptr first = e;
      lock.unlock();
      comm_ = make_in_process_communicator(replicas_);  // the aborted one is spent
      std::rethrow_exception(first);
    }
}

}  // namespace tandem::distribute
