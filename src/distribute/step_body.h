#pragma once
// What every runner computes on some rows of a global batch, stated once: TrainStep's parts (one
// by one, stacked or together), a model-parallel copy, a pipeline's micro-batch, a
// parameter-server worker's step. A part runs forward, loss and backward here (train_rows), and
// every runner's backward is this file's (backward): the runners keep only what differs (the
// order of parts, a pipeline's schedule, the push). Two rules:
// - Dropout draws each row's mask from (seed, step, the row's place in the global batch): a row
//   gets the mask it would get on one device, however the batch is split (BatchRows::context).
// - Backward starts from the rows' batch mean when they are the whole batch, else from their sum
//   ÷ the global batch's rows, so that the parts' gradients add up to the batch mean's. Either way
//   each row's gradient starts at 1 ÷ the global rows (mean's backward and scale's give the same
//   float), so the split changes no gradient bit (rows_loss).
// The caller keeps what is its own: its tape (reused step to step), deferred kernel gradients and
// moving statistics (given with the rows), row-exact products, when a pipeline stage's backward
// runs (after the next stage's gradient comes), and what fit's metrics are told.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "tandem/autograd.h"
#include "tandem/graph.h"
#include "tandem/layers.h"
#include "tandem/losses.h"
#include "tandem/timeline.h"

namespace tandem::distribute {

// Rows [first, first + n) of a global batch of `global` rows, in the step keyed `step` of a run
// seeded `seed`.
struct BatchRows {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t first = 0;
  int64_t global = 0;
  // What the runner collects over several calls before it applies it (CallContext's): null, each call's own.
  ops::DeferredKernelGradients* kernel_gradients = nullptr;
  ops::DeferredMovingStatistics* moving_statistics = nullptr;
  // These rows' sample weights (GlobalBatch::weights_of), or undefined: each row's loss as it is.
  Tensor weights;
  // Training mode, dropout keyed by the rows' place in the global batch.
  CallContext context() const { return {true, RandomKey{seed, step, first}, kernel_gradients, moving_statistics}; }
};

struct RowsLoss {
  Tensor per_sample;   // each row's loss
  Tensor loss;         // where backward starts
  bool whole = false;  // the rows are the whole batch: `loss` is their mean
};
// The loss of `predictions` against `y`, these rows of the batch: each row's times its sample
// weight, then its activity penalties (CallContext::penalties) added, which Keras does not weight.
RowsLoss rows_loss(const Loss& loss, const Tensor& y, const Tensor& predictions, const BatchRows& rows,
                   std::span<const Tensor> penalties = {});

struct RowsForward {
  Tensor predictions;
  RowsLoss loss;
};
// Forward over `net` (a chain or a graph) on the tape recording now, then rows_loss with the
// layers' activity penalties.
RowsForward forward_rows(const layers::Network& net, const Loss& loss, const Tensor& x, const Tensor& y,
                         const BatchRows& rows);

// Where a part's backward writes: the gradients of `sources` into `grads` (one each), ready(i)
// called as each is final (a reducer's buckets); from a loss, or, for a pipeline stage's
// non-scalar output, from the gradient flowing into it (output_gradient, the next stage's).
struct Backward {
  std::span<const Tensor> sources;
  std::span<Tensor> grads;
  const std::function<void(size_t source)>* ready = nullptr;
  Tensor output_gradient;
};
// Backward from `target` on `tape`, which recorded it: every runner's one gradient call.
void backward(GradientTape& tape, const Tensor& target, const Backward& to);

// Where a part's forward and backward spans go (no timeline: nowhere), on the thread's row.
struct Spans {
  Timeline* timeline = nullptr;
  const char* row = "";
};
// The step body: forward over `net` and the rows' loss (forward_rows) on `tape` (reset first),
// then backward into `to` from the objective, the loss or what `objective` makes of it (a
// parameter-server worker adds its share of the weights' penalties). Returns the forward's.
RowsForward train_rows(GradientTape& tape, const layers::Network& net, const Loss& loss, const Tensor& x,
                       const Tensor& y, const BatchRows& rows, const Backward& to, Spans spans = {},
                       const std::function<Tensor(const Tensor& loss)>& objective = nullptr);

}  // namespace tandem::distribute
