// The step body's two rules (step_body.h).
#include "distribute/step_body.h"

#include "tandem/ops.h"

namespace tandem::distribute {

RowsLoss rows_loss(const Loss& loss, const Tensor& y, const Tensor& predictions, const BatchRows& rows,
                   std::span<const Tensor> penalties) {
  RowsLoss out;
  out.per_sample = loss.per_sample(y, predictions);
  if (rows.weights.defined())
    out.per_sample = ops::mul(out.per_sample, ops::to_device(rows.weights, predictions.device()));
  for (const Tensor& p : penalties) out.per_sample = ops::add(out.per_sample, p);
  out.whole = out.per_sample.dim(0) == rows.global;  // one device's step
  out.loss = out.whole ? ops::mean(out.per_sample)
                       : ops::scale(ops::sum(out.per_sample), 1.0f / static_cast<float>(rows.global));
  return out;
}

RowsForward forward_rows(std::span<const std::shared_ptr<layers::Layer>> stack, const Loss& loss, const Tensor& x,
                         const Tensor& y, const BatchRows& rows) {
  RowsForward out;
  std::vector<Tensor> penalties;
  CallContext context = rows.context();
  context.penalties = &penalties;
  out.predictions = layers::call_layers(stack, x, context);
  out.loss = rows_loss(loss, y, out.predictions, rows, penalties);
  return out;
}

}  // namespace tandem::distribute
