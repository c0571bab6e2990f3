// A parameter server's update policies, one per mode (updates.h).
#include "distribute/ps/updates.h"

#include <algorithm>

#include "distribute/ps/wire.h"
#include "tandem/error.h"

namespace tandem::distribute::ps {
namespace {

class AsynchronousUpdates : public UpdatePolicy {
 public:
  AsynchronousUpdates(Optimizer& optimizer, std::span<Variable* const> variables, int64_t bound,
                      std::vector<int64_t> clocks, Apply apply)
      : optimizer_(optimizer),
        variables_(variables.begin(), variables.end()),
        bound_(bound),
        clocks_(std::move(clocks)),
        apply_(std::move(apply)) {}

  int64_t push(Push p) override {
    // The worker's clock against the slowest worker's, by the pushes applied here.
    if (p.worker >= clocks_.size() && bound_ < 0 && p.worker < kMaxWorkers)
      clocks_.resize(p.worker + 1, 0);  // a worker added to the running job
    if (p.worker >= clocks_.size()) fail("push: from worker {}, of {}", p.worker, clocks_.size());
    int64_t clock = p.info.clock;
    if (clock < 0) fail("push: worker {}'s clock is {}", p.worker, clock);
    auto slowest = std::min_element(clocks_.begin(), clocks_.end());
    int64_t ahead = clock - *slowest;
    if (bound_ >= 0 && ahead > bound_)
      fail("push: worker {}'s step {} is {} steps ahead of worker {}, which has finished {} (the bound is {})",
           p.worker, clock, ahead, slowest - clocks_.begin(), *slowest, bound_);
    apply_(of_worker(p.worker), p.gradients);
    clocks_[p.worker] = std::max(clocks_[p.worker], clock + 1);
    ++ahead_counts_[std::max<int64_t>(ahead, 0)];
    return p.version - p.computed_on;
  }

  Optimizer& saved() override {
    auto it = of_worker_.find(0);
    return it != of_worker_.end() ? *it->second : optimizer_;
  }
  int64_t iterations() override {
    int64_t iterations = saved().iterations();
    for (const auto& [worker, optimizer] : of_worker_) iterations = std::max(iterations, optimizer->iterations());
    return iterations;
  }
  bool journals() const override { return true; }
  const std::map<int64_t, int64_t>& ahead_counts() const override { return ahead_counts_; }

  // The histogram as percentiles, for people (a run's may have a hundred buckets); the chief's
  // report keeps its whole histogram by the chief's clocks.
  std::string describe(const std::string& server) const override {
    if (ahead_counts_.empty()) return {};
    int64_t pushes = 0;
    for (auto [ahead, count] : ahead_counts_) pushes += count;
    auto percentile = [&](int p) {  // the least number of steps ahead at or below which p% of the pushes were
      int64_t seen = 0;
      for (auto [ahead, count] : ahead_counts_)
        if ((seen += count) * 100 >= pushes * p) return ahead;
      return ahead_counts_.rbegin()->first;
    };
    return fmt::format(
        "{}: {} pushes applied; steps their worker was ahead of the slowest: p50 {}, p90 {}, p99 {}, max {} ({})",
        server, pushes, percentile(50), percentile(90), percentile(99), ahead_counts_.rbegin()->first,
        bound_ >= 0 ? fmt::format("bound {}", bound_) : std::string("no bound"));
  }

 private:
  Optimizer& of_worker(uint32_t worker) {
    auto& mine = of_worker_[worker];
    if (!mine) mine = optimizer_.replicate(variables_);  // from the state the chief gave
    return *mine;
  }
  Optimizer& optimizer_;  // as the chief gave it
  std::vector<Variable*> variables_;
  int64_t bound_;                // -1: none
  std::vector<int64_t> clocks_;  // each worker's steps applied here
  Apply apply_;
  std::map<uint32_t, std::unique_ptr<Optimizer>> of_worker_;
  std::map<int64_t, int64_t> ahead_counts_;
};

class SynchronousUpdates : public UpdatePolicy {
 public:
  SynchronousUpdates(Optimizer& optimizer, int workers, bool holds_nothing, Apply apply)
      : optimizer_(optimizer), workers_(workers), holds_nothing_(holds_nothing), apply_(std::move(apply)) {}

  int64_t push(Push p) override {
    int64_t size = p.info.round_pushes;
    if (size < 1) fail("push: a synchronous round of {} pushes", size);
    if (size > workers_) fail("push: a round of {} pushes from {} workers", size, workers_);
    if (holds_nothing_) return 0;  // no shard here (more servers than shards): no round to keep
    // Computed on a version a round already applied left behind (backup workers), or for a round
    // already applied or closed: dropped as stale.
    if (p.computed_on < p.version || (p.info.round >= 0 && p.info.round <= last_round_)) {
      ++dropped_;
      return -1;
    }
    if (round_.empty()) {
      round_size_ = size;
      round_key_ = p.info.round;
    }
    if (p.info.round != round_key_) fail("push: for round {}, the round in progress is {}", p.info.round, round_key_);
    if (size != round_size_) fail("push: a round of {} pushes, the round in progress has {}", size, round_size_);
    if (size == workers_ && round_.count(p.worker)) fail("push: worker {} pushed twice in one round", p.worker);
    round_.emplace(p.worker, std::move(p.gradients));
    if (static_cast<int64_t>(round_.size()) == round_size_) apply_round();
    return 0;
  }
  int64_t close_round(int64_t round) override {
    if (holds_nothing_) return -1;  // no count to give
    int64_t pushes = 0;
    if (!round_.empty() && round >= 0 && round_key_ < round)
      fail("close: round {} closed while round {} is in progress", round, round_key_);
    if (!round_.empty() && (round < 0 || round_key_ == round)) {
      pushes = static_cast<int64_t>(round_.size());
      apply_round();
    } else if (round >= 0 && round == last_round_) {
      pushes = last_pushes_;  // it was complete before the close came
    }
    last_round_ = std::max(last_round_, round);
    return pushes;
  }
  Optimizer& saved() override { return optimizer_; }
  int64_t dropped() const override { return dropped_; }

 private:
  // The round's pushes summed in worker order (then arrival), one update.
  void apply_round() {
    last_pushes_ = static_cast<int64_t>(round_.size());
    last_round_ = std::max(last_round_, round_key_);
    std::vector<Tensor> sum = std::move(round_.begin()->second);
    for (auto it = std::next(round_.begin()); it != round_.end(); ++it)
      for (size_t i = 0; i < sum.size(); ++i) {
        float* to = sum[i].data<float>();
        const float* from = it->second[i].data<float>();
        for (int64_t k = 0, n = sum[i].numel(); k < n; ++k) to[k] += from[k];
      }
    round_.clear();
    apply_(optimizer_, sum);
  }
  Optimizer& optimizer_;
  int workers_;
  bool holds_nothing_;
  Apply apply_;
  // The round's pushes by worker. With backup workers (a round of fewer pushes than workers), a
  // worker may push twice into one round; the sum runs by worker, then arrival.
  std::multimap<uint32_t, std::vector<Tensor>> round_;
  int64_t round_size_ = 0;
  int64_t round_key_ = -1;  // the round in progress (-1: rounds not numbered)
  // The last round applied or closed (-1: none), and the pushes it was applied with.
  int64_t last_round_ = -1, last_pushes_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace

const std::map<int64_t, int64_t>& UpdatePolicy::ahead_counts() const {
  static const std::map<int64_t, int64_t> none;
  return none;
}

std::unique_ptr<UpdatePolicy> make_update_policy(const PsPolicy& policy, Optimizer& optimizer,
                                                 std::span<Variable* const> variables, int workers,
                                                 std::vector<int64_t> clocks, UpdatePolicy::Apply apply) {
  if (policy.kind == PsPolicy::Kind::Synchronous)
    return std::make_unique<SynchronousUpdates>(optimizer, workers, variables.empty(), std::move(apply));
  clocks.resize(static_cast<size_t>(workers), 0);
  int64_t bound = policy.kind == PsPolicy::Kind::BoundedStaleness ? policy.max_staleness : -1;
  return std::make_unique<AsynchronousUpdates>(optimizer, variables, bound, std::move(clocks), std::move(apply));
}

}  // namespace tandem::distribute::ps
