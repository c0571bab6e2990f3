// The intra-op pool: each thread that runs ops gets helpers of its own (made when an op first
// needs them), so that replicas with their own thread counts never share one. A job is a chunk
// counter; the caller takes chunks too. Helpers and caller wait for each other by spinning only
// while spin_allowance says the cores are free, then sleep on a futex (std::atomic::wait).
// OpenMP is kept to one thread everywhere: oneDNN's own parallel split would make the bits depend
// on the thread count, and libgomp's barriers spin ~300,000 times, which on a shared core turns
// each op into a lost time slice (24 ms per step instead of 0.22 ms, measured with one other busy
// process on 2 cores).
#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cpu_budget.h"
#include "tandem/runtime.h"

namespace tandem::core {
namespace {

thread_local bool inside_job = false;  // a chunk that runs an op runs it on its own thread, inline

class Pool {
 public:
  ~Pool() {
    stopping_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& h : helpers_) h->thread.join();
  }

  // Runs the job on the caller and helpers 0 .. `helpers`-1.
  void run(int helpers, int64_t chunks, ChunkFn fn, const void* context) {
    while (static_cast<int>(helpers_.size()) < helpers) {
      auto helper = std::make_unique<Helper>();
      Helper* h = helper.get();
      uint32_t now = generation_.load();  // the helper's first job is the next generation
      helpers_.push_back(std::move(helper));
      helper_count_.store(static_cast<int>(helpers_.size()), std::memory_order_relaxed);
      h->thread = std::thread([this, h, now] { helper_loop(*h, now); });
    }
    fn_ = fn;
    context_ = context;
    chunks_ = chunks;
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    // A helper works on a generation only when assigned it: one that wakes late and sees a newer
    // generation than it was assigned never counts itself done twice.
    uint32_t job = generation_.load(std::memory_order_relaxed) + 1;
    for (int i = 0; i < helpers; ++i) helpers_[static_cast<size_t>(i)]->assigned.store(job, std::memory_order_relaxed);
    generation_.store(job);  // seq_cst, publishing the above: a helper about to sleep sees it or is in sleepers_
    if (sleepers_.load() > 0) generation_.notify_all();
    work();
    auto all_done = [&] { return done_.load(std::memory_order_acquire) == helpers; };
    if (!spin_until(spin_allowance(helpers + 1), all_done)) {
      caller_sleeping_.store(true);
      for (int d = done_.load(); d != helpers; d = done_.load()) done_.wait(d);
      caller_sleeping_.store(false);
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Helper {
    std::thread thread;
    std::atomic<uint32_t> assigned{0};  // the generation this helper is to work on
  };

  void work() {
    for (int64_t c; (c = next_.fetch_add(1, std::memory_order_relaxed)) < chunks_;) {
      try {
        fn_(context_, c);
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  void helper_loop(Helper& self, uint32_t seen) {
    single_threaded_openmp();
    inside_job = true;
    for (;;) {
      auto started = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(spin_allowance(helper_count_.load(std::memory_order_relaxed) + 1), started)) {
        sleepers_.fetch_add(1);
        if (generation_.load() == seen) generation_.wait(seen);
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stopping_.load()) return;
      if (self.assigned.load(std::memory_order_relaxed) != seen) continue;
      work();
      done_.fetch_add(1);  // seq_cst: either the caller sees it or we see it sleeping
      if (caller_sleeping_.load()) done_.notify_one();
    }
  }

  std::vector<std::unique_ptr<Helper>> helpers_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> done_{0}, sleepers_{0}, helper_count_{0};
  std::atomic<bool> caller_sleeping_{false}, stopping_{false};
  std::atomic<int64_t> next_{0};
  ChunkFn fn_ = nullptr;
  const void* context_ = nullptr;
  int64_t chunks_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

Pool& thread_pool() {
  thread_local Pool pool;
  return pool;
}

}  // namespace

void single_threaded_openmp() {
  thread_local bool done = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)done;
}

int64_t split_chunks(int64_t units, double work, int64_t granule) {
  if (units <= 0) return 1;
  auto few = std::min(kFewChunks, static_cast<int64_t>(work / kMinChunkWork));
  auto many = std::min(kMaxChunks, static_cast<int64_t>(work / kLargeChunkWork));
  int64_t by_units = (units + granule - 1) / granule;
  int64_t chunks = std::clamp<int64_t>(std::min(std::max(few, many), by_units), 1, kMaxChunks);
  // 1, 2 or a multiple of 4, so that 2 and 4 threads share the chunks evenly.
  return chunks >= 4 ? chunks / 4 * 4 : std::min<int64_t>(chunks, 2);
}

Range chunk_range(int64_t units, int64_t chunks, int64_t c, int64_t granule) {
  int64_t granules = (units + granule - 1) / granule;
  int64_t begin = granules * c / chunks * granule, end = granules * (c + 1) / chunks * granule;
  return {std::min(begin, units), std::min(end, units)};
}

int threads_for(int64_t chunks, double work) {
  int64_t by_work = std::max<int64_t>(1, static_cast<int64_t>(work / kMinWorkPerThread));
  int64_t threads = std::min<int64_t>({num_threads(), chunks, by_work});
  if (threads <= 1) return 1;
  return static_cast<int>(std::min<int64_t>(threads, free_cores()));
}

void run_chunks(int64_t chunks, double work, ChunkFn fn, const void* context) {
  single_threaded_openmp();
  int threads = inside_job ? 1 : threads_for(chunks, work);
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(context, c);
    return;
  }
  inside_job = true;
  struct Leave {
    ~Leave() { inside_job = false; }
  } leave;
  thread_pool().run(threads - 1, chunks, fn, context);
}

}  // namespace tandem::core
