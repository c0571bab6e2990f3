// In-process all-reduce of 10 MB of gradients across replica threads, beside this machine's
// memcpy bandwidth measured in the same run (target: at least half of it).
// Usage: bench_allreduce [replicas] [megabytes] [repetitions]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tandem/collectives/communicator.h"
#include "tandem/error.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) try {
  int replicas = argc > 1 ? std::atoi(argv[1]) : 2;
  double megabytes = argc > 2 ? std::atof(argv[2]) : 10.0;
  int repetitions = argc > 3 ? std::atoi(argv[3]) : 50;
  auto n = static_cast<int64_t>(megabytes * 1e6 / 4);
  auto bytes = static_cast<double>(n) * 4;

  std::vector<float> src(static_cast<size_t>(n), 1.0f), dst(static_cast<size_t>(n));
  double best_copy = 1e9;
  for (int i = 0; i < repetitions; ++i) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(n) * 4);
    best_copy = std::min(best_copy, std::chrono::duration<double>(Clock::now() - t0).count());
  }

  auto comm = tandem::distribute::make_in_process_communicators(replicas);
  std::vector<std::vector<float>> grads(static_cast<size_t>(replicas),
                                        std::vector<float>(static_cast<size_t>(n), 0.5f));
  std::vector<double> best(static_cast<size_t>(replicas), 1e9);
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r)
    threads.emplace_back([&, r] {
      // One replica per core, as MirroredStrategy will pin them.
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(r % static_cast<int>(std::thread::hardware_concurrency()), &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      std::vector<float>& mine = grads[static_cast<size_t>(r)];
      for (int i = 0; i < repetitions; ++i) {
        // Fresh gradients each time, written by their replica as backward would (so the buffers
        // start in their owners' caches, not where the last all-reduce left them).
        std::fill(mine.begin(), mine.end(), 0.5f + static_cast<float>(r));
        comm[static_cast<size_t>(r)]->barrier();
        auto t0 = Clock::now();
        comm[static_cast<size_t>(r)]->all_reduce(std::span<float>(grads[static_cast<size_t>(r)]));
        best[static_cast<size_t>(r)] =
            std::min(best[static_cast<size_t>(r)], std::chrono::duration<double>(Clock::now() - t0).count());
      }
    });
  for (auto& t : threads) t.join();
  double all_reduce = *std::max_element(best.begin(), best.end());
  // Bandwidth as memcpy counts it: the buffer's bytes over the time, for both.
  double copy_gbs = bytes / best_copy / 1e9, reduce_gbs = bytes / all_reduce / 1e9;
  std::printf(
      "{\"replicas\": %d, \"megabytes\": %.1f, \"memcpy_gb_per_s\": %.2f, \"all_reduce_gb_per_s\": %.2f, "
      "\"all_reduce_ms\": %.3f, \"fraction_of_memcpy\": %.3f}\n",
      replicas, megabytes, copy_gbs, reduce_gbs, all_reduce * 1e3, reduce_gbs / copy_gbs);
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
