#pragma once
// Process-level knobs of the CPU runtime: how many threads one op may use.
//
// Tandem runs its kernels' parallel work on its own intra-op threads (one small pool per calling
// thread). The work split is fixed by each op's shape, never by the thread count, so results are
// bitwise the same at any thread count; the thread count only decides how fast. An op uses
// several threads only where its work pays for the hand-off, and never more than the cores that
// are free: cores outside the affinity mask or a cgroup CPU quota are not counted, and cores that
// other processes keep busy are given up (checked every 20 ms), with no spinning while they are.
#include <string>

namespace tandem {

inline constexpr int kMaxThreads = 1024;  // the most intra-op threads or replicas one may ask for

// The calling thread's intra-op thread ceiling: 1..kMaxThreads, or 0 for automatic (the
// OMP_NUM_THREADS environment variable when set, else every usable core). A ceiling above the
// usable cores is kept, but never more threads than usable cores run at once.
void set_num_threads(int threads);
int num_threads();          // the ceiling in effect for the calling thread
int num_threads_setting();  // what set_num_threads gave the calling thread (0: automatic)

// Cores this process may use: its affinity mask (taskset, mpirun binding), capped by a cgroup
// CPU quota (containers); at least 1.
int usable_cores();
// Usable cores that other processes are not keeping busy right now (at least 1).
int free_cores();

// One paragraph on the calling thread's thread choice and why (tandem fit --verbose 2).
std::string describe_threads();

// The vector level Tandem's own kernels run at: "avx512" (x86-64-v4), "avx2" (x86-64-v3: AVX2 and
// FMA) or "x86-64": the host's, capped by the environment variable TANDEM_MAX_ISA (avx2 or
// avx512, read once; it caps oneDNN's kernels too unless ONEDNN_MAX_CPU_ISA is set). Deterministic
// training gives the same bits at avx2 and avx512. Throws tandem::Error for another value.
std::string cpu_isa();

}  // namespace tandem
