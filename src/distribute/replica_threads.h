#pragma once
// The threads a strategy runs its replicas (or devices) on, held by the strategies that run
// several on this process (MirroredStrategy and its kinds, ModelParallelStrategy,
// PipelineStrategy): replica 0 is the calling thread, replicas 1.. persistent threads of their
// own, pinned to the process's affinity mask while there are enough CPUs, each with its own
// intra-op thread count. A step's hand-offs (start, finish) are an atomic generation and counter:
// while every replica's cores are free the waiting side spins a short while before sleeping, since
// a sleep and wake costs system calls and, on a virtual machine, a halted core's wake-up; when
// they are not (more replicas than cores, other busy processes), it sleeps at once.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

class ReplicaThreads {
 public:
  // The replicas' group: one handle per replica, rank r for replica r.
  using MakeGroup = std::function<std::vector<std::unique_ptr<Communicator>>()>;
  // Starts the threads of replicas 1 .. replicas - 1 (`who` names the strategy in errors). Each
  // runs as `owner`'s replica r (its replica context, its update rule) while it runs a job.
  ReplicaThreads(StrategyExtended& owner, int replicas, int threads_per_replica, bool pin, const MakeGroup& make_group,
                 std::string who);
  ~ReplicaThreads();  // stops and joins the threads
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  // fn(r) on every replica at once, r = 0 on the calling thread. A replica's exception aborts the
  // group (the others' collectives fail instead of waiting), the group is made again (an aborted one
  // is spent), and the exception of the lowest replica whose own code failed is rethrown.
  void run(const std::function<void(int replica)>& fn);
  Communicator& communicator(int replica) { return *group_.at(static_cast<size_t>(replica)); }
  int replicas() const { return replicas_; }
  int threads_per_replica() const { return threads_per_replica_; }
  // The jobs each replica has finished (replica r's count is written by its own thread only and
  // read between runs).
  std::vector<int64_t> runs() const { return runs_; }

 private:
  struct Workers;
  void start_thread(int r, bool pin, const std::vector<int>& cpus);
  void run_replica(int r, const std::function<void(int)>& job);  // errors kept, the others told
  void stop();
  StrategyExtended& owner_;
  int replicas_, threads_per_replica_;
  MakeGroup make_group_;
  std::vector<int64_t> runs_;
  std::vector<std::unique_ptr<Communicator>> group_;
  std::unique_ptr<Workers> workers_;
};

// The intra-op threads each of `devices` devices runs with: `threads`, or (0) the usable cores
// shared out, at least 1. A count out of range (devices 1 .. kMaxThreads, threads 0 ..
// kMaxThreads) is an Error naming `who` and the option `field`.
int threads_per_device(const std::string& who, int devices, const char* field, int threads);

}  // namespace tandem::distribute
