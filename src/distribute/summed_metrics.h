#pragma once
// What a runner whose processes each compute some of a step's predictions (the last stages of a
// pipeline, the first device of each copy of a split model) adds to fit's metrics and loss: each
// process updates the metrics with its own, then what each added (sums and counts, exact) is
// summed over the processes, so that every process logs the same.
#include <span>
#include <utility>
#include <vector>

#include "tandem/collectives/communicator.h"
#include "tandem/metrics.h"

namespace tandem::distribute {

class SummedMetrics {
 public:
  // Before this process updates the metrics with its predictions.
  void start(std::span<Metric> metrics) {
    before_.clear();
    for (Metric& m : metrics) before_.push_back(m.accumulators());
  }
  // After: over `processes` (null: this one alone) the metrics' additions summed; returns the sum
  // of every process's `loss`.
  double finish(Communicator* processes, std::span<Metric> metrics, double loss) {
    if (processes == nullptr) return loss;
    added_.assign(1, loss);
    for (size_t i = 0; i < metrics.size(); ++i) {
      auto [total, count] = metrics[i].accumulators();
      added_.push_back(total - before_[i].first);
      added_.push_back(static_cast<double>(count - before_[i].second));
    }
    processes->all_reduce(std::span<double>(added_), ReduceOp::Sum);
    for (size_t i = 0; i < metrics.size(); ++i)
      metrics[i].restore(
          {before_[i].first + added_[1 + 2 * i], before_[i].second + static_cast<int64_t>(added_[2 + 2 * i])});
    return added_[0];
  }

 private:
  std::vector<std::pair<double, int64_t>> before_;
  std::vector<double> added_;
};

}  // namespace tandem::distribute
