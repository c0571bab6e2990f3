#pragma once
// oneDNN's generated f32 GEMM kernels (the version Debian 12 ships, 2.7) point the stack pointer
// into a heap buffer while they run: a signal handled on that thread meanwhile (Python's SIGINT
// handler, a profiler's SIGPROF, any handler a user installs) has its frame written by the kernel
// over that heap memory, and the process later aborts in free() ("corrupted size vs. prev_size").
// oneDNN fixed it upstream in 2026 (uxlfoundation/oneDNN#4845). Until the library we link has
// the fix, every call into oneDNN holds the calling thread's asynchronous signals: one that
// arrives is delivered to another thread, or to this one as the call returns. Faults (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) stay unblocked. It costs two system calls per
// call: 0.24 us a pair here, and the tutorial MLP at batch 25 makes about 11 calls per step
// (strace: 53,820 rt_sigprocmask calls in one epoch of 2,400 steps and its evaluation), about 1%
// of its 220 us step.
#include <pthread.h>
#include <signal.h>

namespace tandem::kernels::cpu {

class AsyncSignalsHeld {
 public:
  AsyncSignalsHeld() {
    static const sigset_t held = [] {
      sigset_t s;
      sigfillset(&s);
      for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&s, fault);
      return s;
    }();
    pthread_sigmask(SIG_BLOCK, &held, &previous_);
  }
  ~AsyncSignalsHeld() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  AsyncSignalsHeld(const AsyncSignalsHeld&) = delete;
  AsyncSignalsHeld& operator=(const AsyncSignalsHeld&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace tandem::kernels::cpu
