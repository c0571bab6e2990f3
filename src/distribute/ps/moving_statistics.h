#pragma once
// Batch normalization's moving statistics under parameter servers. The servers hold trainable
// variables only; a layer's moving mean and variance live in the chief's model, as TensorFlow keeps
// them in one place the workers' steps update. Each worker's step leaves its own copy as it is
// (ops::DeferredMovingStatistics) and sends its batch's statistics with its result; the chief moves
// its model's toward them: each result's at once (asynchronous; in the steps' order under --record
// and --replay, so that a replay ends with the record's bits), a synchronous round's once, toward
// the round's average (as unsynchronized mirrored replicas move theirs).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/layers.h"
#include "tandem/ops.h"

namespace tandem::distribute::ps {

// The layers' moving statistics, in the model's layer order (every task's model has the same).
std::vector<layers::Layer::MovingStatistics> moving_statistics_of(
    const std::vector<std::shared_ptr<layers::Layer>>& layers);

// A worker's step's statistics as its result's item: float32, per layer its calls' mean per
// channel, then their variance, then the calls (0: not called, the rest zeros).
Tensor moving_statistics_item(const ops::DeferredMovingStatistics& step,
                              std::span<const layers::Layer::MovingStatistics> layers);

// The chief's side: results' statistics summed, then its model's moved.
class MovingStatisticsSums {
 public:
  explicit MovingStatisticsSums(std::vector<layers::Layer::MovingStatistics> layers);
  bool empty() const { return layers_.empty(); }
  // A result's item (`from` names the worker), checked against the model: added to the sums.
  void add(const Tensor& item, const std::string& from);
  // The model's statistics moved toward the sums' average; the sums cleared.
  void move();

 private:
  std::vector<layers::Layer::MovingStatistics> layers_;
  std::vector<std::vector<double>> sums_;  // per layer, as DeferredMovingStatistics::sums gives them
};

}  // namespace tandem::distribute::ps
