#pragma once
// Which cores are ours: the affinity mask and cgroup quota (fixed), and how many of them other
// processes leave free (sampled). Read by the intra-op pool and the replica hand-offs to decide
// how many threads run and whether a waiting thread may spin.
#include <sched.h>

#include <chrono>

namespace tandem::core {

struct CoreBudget {
  int online = 1;    // the machine's online CPUs
  int affinity = 1;  // CPUs in this process's affinity mask
  int quota = 0;     // ceil(cgroup CPU quota / period); 0 when unlimited
  int usable = 1;    // min(affinity, quota)
};
const CoreBudget& core_budget();

// The number of usable cores other processes leave free: the median of samples taken at most
// every 20 ms (runnable tasks of the machine, from /proc/loadavg, less this process's own running
// threads), so that a busy process is seen within a few samples and a passing one is not.
int free_cores();

// How long a thread waiting for `threads` threads of this process may spin before it sleeps:
// a short while when that many cores are free, else not at all. Never long enough to lose a
// time slice: a sleep costs a wake-up (tens of µs), a spin on a taken core costs the core.
std::chrono::nanoseconds spin_allowance(int threads);
inline constexpr std::chrono::microseconds kSpinAllowance{200};
inline constexpr int kYieldsBeforeSleeping = 16;

// Spins while `ready()` is false for at most `allowance`; true once it holds (the caller then
// sleeps on its own condition). With no allowance (the cores are not all free) it yields the core
// a few times instead: when the thread it waits for is runnable on this core, that hands it over
// without a sleep and a wake-up; when nothing else is, it costs a few system calls.
template <class Ready>
bool spin_until(std::chrono::nanoseconds allowance, const Ready& ready) {
  if (allowance.count() == 0) {
    for (int i = 0; i < kYieldsBeforeSleeping; ++i) {
      if (ready()) return true;
      sched_yield();
    }
    return ready();
  }
  auto until = std::chrono::steady_clock::now() + allowance;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return ready();
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace tandem::core
