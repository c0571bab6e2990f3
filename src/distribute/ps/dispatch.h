#pragma once
// How the chief hands fit's batches to the workers: one policy per mode, chosen from the options
// once. The Coordinator (coordinator.h) keeps the workers, the messages and the faults, and asks
// its policy only what differs between the modes:
// - Asynchronous: each batch to the worker freed last, at once; a step is one push, applied alone.
//   Workers and servers may die and come back (not under --replay, which forces the recorded order).
// - Bounded staleness S: as asynchronous, but to the free worker furthest behind, and only if it is
//   at most S steps ahead of the slowest worker's finished steps (else the batch waits for results).
// - Synchronous rounds: fit's batches gather into a round of one per live worker, handed out
//   together; the next round starts when every result of this one is in. A worker that dies is
//   dropped from the rounds.
// - Backup workers B: as asynchronous, each step one push of a round of W - B that the servers apply
//   without waiting for the rest (a late push is dropped); a worker whose push is in the round waits
//   for the round to close, as SyncReplicasOptimizer's tokens.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/distribute/parameter_server.h"

namespace tandem::distribute::ps {

// What the coordinator knows of each worker that a policy reads.
struct WorkerClocks {
  std::vector<int64_t> started, finished;  // steps handed out, and finished (its clock)
  std::vector<bool> alive;                 // false: died (expendable), not back
  // The finished steps of the slowest worker alive (0 with none).
  int64_t slowest() const;
};

// What this epoch's results said: the staleness their gradients were applied with, and those dropped.
struct ResultCounts {
  int64_t staleness_sum = 0, staleness_max = 0, applied = 0, dropped = 0;
};

class DispatchPolicy {
 public:
  virtual ~DispatchPolicy() = default;
  // Batches gather into rounds of one per live worker (synchronous); else each goes out at once.
  virtual bool rounds() const { return false; }
  // The pushes a server sums before one update, for a step handed out alone in a job of `workers`.
  virtual int64_t pushes(int workers) const {
    (void)workers;
    return 1;
  }
  // Takes from `free` (the free workers, the one freed last at the back) the worker to step next,
  // or -1 when none may start now.
  virtual int take(std::vector<int>& free, const WorkerClocks& clocks);
  // Worker w's result came (dropped: its push came after its round was applied): the workers that
  // may step again go back to `free`.
  virtual void finished(int w, bool dropped, int workers, std::vector<int>& free) {
    (void)dropped, (void)workers;
    free.push_back(w);
  }
  // Whether a server may die and be restored, and whether a worker may die, with the job going on.
  virtual bool servers_may_die() const { return false; }
  virtual bool workers_may_die() const { return servers_may_die(); }
  // Whether each step's lead on the slowest worker is counted for the run's report.
  virtual bool counts_lead() const { return false; }
  // The epoch's figures for fit's log.
  virtual std::vector<std::pair<std::string, double>> figures(const ResultCounts& counts) const {
    (void)counts;
    return {};
  }
};

std::unique_ptr<DispatchPolicy> make_dispatch_policy(const ParameterServerOptions& options);

}  // namespace tandem::distribute::ps
