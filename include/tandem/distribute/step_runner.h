#pragma once
// The seam between fit's loop and a strategy: the loop hands each global batch to a StepRunner
// the strategy made (StrategyExtended::make_step) and reads back the batch's loss; the runner updates
// fit's metrics from its predictions. How the step runs (replicas in lockstep, workers handed
// steps by a coordinator, pipeline stages) is the strategy's alone.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tandem/losses.h"
#include "tandem/metrics.h"
#include "tandem/optimizers.h"
#include "tandem/tensor.h"

namespace tandem::distribute {

class ModelReplicas;

// A global batch: whole tensors, or its row count and a way to copy rows [begin, end) of it, so
// that each replica copies only its own rows (`x` null: the labels alone). `epoch` and `step` say
// where it sits in fit's loop.
struct GlobalBatch {
  using Gather = std::function<void(int64_t begin, int64_t end, Tensor* x, Tensor& y)>;
  Tensor x, y;
  // Keras' sample weights (sample_weight, class_weight, a dataset's third component): float32, one
  // per row of the global batch, on the host; undefined: every row weighs 1. A row's loss is
  // multiplied by its weight and the batch's loss is Σ weight·loss ÷ its rows, as Keras'.
  Tensor weights;
  int64_t rows = 0;
  Gather gather;  // used when x is undefined
  int epoch = 0;
  int64_t step = 0;
  void slice(int64_t begin, int64_t end, Tensor& xs, Tensor& ys) const;
  // The weights of rows [begin, end) (undefined where the batch has none).
  Tensor weights_of(int64_t begin, int64_t end) const {
    return weights.defined() ? weights.slice(begin, end) : Tensor();
  }
};

// Fills `out` with batch `step` of epoch `epoch`, in any order (false past the epoch's end): fit's
// batches from tensors in memory, which a task that does not run fit's loop (a parameter-server
// worker) reads by the position the chief names instead of receiving their rows.
using BatchAt = std::function<bool(int epoch, int64_t step, GlobalBatch& out)>;

// What a runner is made from: the model's replicas, its loss and optimizer, the seed its dropout
// masks derive from, and fit's running metrics after the loss (updated with every global batch's
// predictions; they must outlive the runner).
struct StepParts {
  ModelReplicas& replicas;
  const Loss& loss;
  Optimizer& optimizer;
  uint64_t seed = 0;
  std::span<Metric> metrics;
  // fit's running loss (the mean per-sample loss), for runners whose steps finish after run()
  // returns: they add each batch's mean, weighted by its rows, when it is known.
  Metric* loss_metric = nullptr;
  // Where fit's batches can be read by position (tensors in memory; not a Dataset's stream).
  BatchAt batch_at;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Whether the batch source may leave the rows to GlobalBatch::gather (each replica copies its own).
  virtual bool lazy_batches() const = 0;
  // Before each step, collective where several processes train: this process's batch (`have`:
  // false when its data ran out) is checked against the others' (a mismatch is named, an Error).
  virtual void check_batch(bool have, int64_t rows, int epoch, int64_t step) = 0;
  // One step on the global batch; `key` keys its dropout masks (the optimizer's iteration).
  // Returns the global batch's mean per-sample loss (each row's times its sample weight, plus its
  // activity penalties) plus the trainable weights' regularizer penalties before the update, as
  // Keras' fit reports it, and the metrics hold its predictions; or,
  // where the step finishes later (handed to a worker), nullopt, and the runner adds both to the
  // metrics (StepParts::loss_metric) when they come.
  virtual std::optional<double> run(const GlobalBatch& batch, uint64_t key) = 0;
  // Before an epoch ends (validation, callbacks, checkpoints): every step handed out has
  // finished, its loss and predictions are in the metrics, and the model holds the variables.
  virtual void finish_epoch() {}
  // What the runner adds to the epoch's logs (the parameter servers' staleness), by name.
  virtual std::vector<std::pair<std::string, double>> epoch_figures() { return {}; }
};

}  // namespace tandem::distribute
