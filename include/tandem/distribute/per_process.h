#pragma once
// One replica per process, each stepping on a batch of its own, the processes started together
// (Horovod's way: hvd::DistributedOptimizer sets this rule on the optimizer as its own route).
// Before each update the gradients of backward_passes_per_step passes are summed, then reduced
// over the processes by the strategies' GradientReducer (Bucketed: buckets of bucket_bytes, each
// all-reduced on the communicator's thread while the next is sent; every element summed in rank
// order, so the buckets change no bit), then scaled.
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/distribute/strategy.h"
#include "tandem/distribute/update_rule.h"

namespace tandem::distribute {

class GradientReducer;

struct PerProcessOptions {
  int64_t bucket_bytes = int64_t{64} << 20;     // 0: one bucket per gradient
  Compression compression = Compression::None;  // gradients on the wire
  int backward_passes_per_step = 1;             // passes summed locally before one reduction and update
  bool average_aggregated_gradients = false;    // divide that local sum by the passes
  bool mean = true;                             // over the processes (false: their sum)
  std::string name = "PerProcessUpdate";        // who speaks in error messages
};

class PerProcessUpdate : public UpdateRule {
 public:
  // `processes`: the group of processes (asked at each reduction, so that it may be made later).
  PerProcessUpdate(std::function<Communicator&()> processes, PerProcessOptions options);
  ~PerProcessUpdate() override;
  // One backward pass's gradients, summed with the step's earlier passes. At the step's last
  // pass: reduced over the processes and scaled (views valid until the next call); else null.
  const std::vector<Tensor>* reduce(std::span<Variable* const> variables, std::span<const Tensor> gradients);
  // reduce, then, at the step's last pass, the optimizer's update here.
  void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) override;
  // Already reduced: the update here.
  void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                     std::span<const Tensor> reduced) override;

 private:
  void check(std::span<Variable* const> variables, std::span<const Tensor> gradients);
  std::function<Communicator&()> processes_;
  PerProcessOptions options_;
  std::unique_ptr<GradientReducer> reducer_;  // for the shapes of the first pass
  std::vector<Shape> shapes_;
  BatchSplit split_;
  int passes_ = 0;
  std::vector<Tensor> pass_, reduced_;
};

}  // namespace tandem::distribute
