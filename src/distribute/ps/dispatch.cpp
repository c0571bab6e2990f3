// The chief's dispatch policies, one per mode (dispatch.h).
#include "distribute/ps/dispatch.h"

#include <algorithm>

namespace tandem::distribute::ps {
namespace {

// Each batch to the worker freed last; tasks may die (not under a replay's forced order).
class Asynchronous : public DispatchPolicy {
 public:
  explicit Asynchronous(bool tasks_may_die) : tasks_may_die_(tasks_may_die) {}
  bool servers_may_die() const override { return tasks_may_die_; }
  bool counts_lead() const override { return true; }
  std::vector<std::pair<std::string, double>> figures(const ResultCounts& c) const override {
    double mean = c.applied > 0 ? static_cast<double>(c.staleness_sum) / static_cast<double>(c.applied) : 0.0;
    return {{"staleness", mean}, {"max_staleness", static_cast<double>(c.staleness_max)}};
  }

 private:
  bool tasks_may_die_;
};

// Asynchronous, each batch to the free worker furthest behind within the bound; no task may die.
class BoundedStaleness : public Asynchronous {
 public:
  explicit BoundedStaleness(int64_t bound) : Asynchronous(false), bound_(bound) {}
  int take(std::vector<int>& free, const WorkerClocks& clocks) override {
    if (free.empty()) return -1;
    auto pick = std::min_element(free.begin(), free.end(), [&](int a, int b) {
      return clocks.started[static_cast<size_t>(a)] < clocks.started[static_cast<size_t>(b)];
    });
    if (clocks.started[static_cast<size_t>(*pick)] - clocks.slowest() > bound_) return -1;
    int w = *pick;
    free.erase(pick);
    return w;
  }

 private:
  int64_t bound_;
};

class SynchronousRounds : public DispatchPolicy {
 public:
  bool rounds() const override { return true; }
  bool workers_may_die() const override { return true; }
};

class BackupWorkers : public DispatchPolicy {
 public:
  explicit BackupWorkers(int backups) : backups_(backups) {}
  int64_t pushes(int workers) const override { return workers - backups_; }
  void finished(int w, bool dropped, int workers, std::vector<int>& free) override {
    if (dropped) {  // a dropped gradient's worker goes on at once, with the round in progress
      free.push_back(w);
      return;
    }
    in_round_.push_back(w);
    if (static_cast<int>(in_round_.size()) == workers - backups_) {
      free.insert(free.end(), in_round_.rbegin(), in_round_.rend());
      in_round_.clear();
    }
  }
  std::vector<std::pair<std::string, double>> figures(const ResultCounts& counts) const override {
    return {{"dropped", static_cast<double>(counts.dropped)}};
  }

 private:
  int backups_;
  std::vector<int> in_round_;  // whose gradients the round in progress holds
};

}  // namespace

int64_t WorkerClocks::slowest() const {
  int64_t least = -1;
  for (size_t w = 0; w < finished.size(); ++w)
    if (alive[w] && (least < 0 || finished[w] < least)) least = finished[w];
  return std::max<int64_t>(least, 0);
}

int DispatchPolicy::take(std::vector<int>& free, const WorkerClocks&) {
  if (free.empty()) return -1;
  int w = free.back();
  free.pop_back();
  return w;
}

std::unique_ptr<DispatchPolicy> make_dispatch_policy(const ParameterServerOptions& options) {
  if (options.mode == PsMode::Synchronous) {
    if (options.backup_workers > 0) return std::make_unique<BackupWorkers>(options.backup_workers);
    return std::make_unique<SynchronousRounds>();
  }
  if (options.max_staleness >= 0) return std::make_unique<BoundedStaleness>(options.max_staleness);
  return std::make_unique<Asynchronous>(options.replay.empty());
}

}  // namespace tandem::distribute::ps
