// The step body: its two rules, forward to backward of a part, and the runners' backward
// (step_body.h).
#include "distribute/step_body.h"

#include <optional>

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

RowsForward forward_rows(const layers::Network& net, const Loss& loss, const Tensor& x, const Tensor& y,
                         const BatchRows& rows) {
  RowsForward out;
  std::vector<Tensor> penalties;
  CallContext context = rows.context();
  context.penalties = &penalties;
  out.predictions = layers::call_network(net, x, context);
  out.loss = rows_loss(loss, y, out.predictions, rows, penalties);
  return out;
}

void backward(GradientTape& tape, const Tensor& target, const Backward& to) {
  if (to.output_gradient.defined()) tape.gradient(target, to.sources, to.grads, to.output_gradient);
  else tape.gradient(target, to.sources, to.grads, to.ready);
}

RowsForward train_rows(GradientTape& tape, const layers::Network& net, const Loss& loss, const Tensor& x,
                       const Tensor& y, const BatchRows& rows, const Backward& to, Spans spans,
                       const std::function<Tensor(const Tensor& loss)>& objective) {
  std::optional<Timeline::Span> span(std::in_place, spans.timeline, "forward", spans.row);
  tape.reset();
  RowsForward out = forward_rows(net, loss, x, y, rows);
  span.emplace(spans.timeline, "backward", spans.row);
  for (Tensor& g : to.grads) g = Tensor();  // the last step's go before backward makes new ones
  backward(tape, objective ? objective(out.loss.loss) : out.loss.loss, to);
  return out;
}

}  // namespace tandem::distribute
