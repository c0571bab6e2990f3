// mean_squared_error: pred:(B,…) target:(B,…) -> (B) = mean over non-batch axes of (pred - target)².
// binary_cross_entropy: x:(B,…) targets:(B,…) -> (B), the mean over non-batch axes of
//   -(t·log p + (1-t)·log(1-p)), p = sigmoid(x) for logits (computed stably) or x clipped to [ε, 1-ε].
// backward: squared error 2(pred - target)/m · dy; logits (sigmoid(x) - t)/m · dy; probabilities
// (p - t)/(p(1-p))/m · dy inside the clip, 0 outside.
#include <algorithm>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

using kernels::PointwiseLoss;

struct PointwiseLossNode : autograd::Node {
  Tensor pred, target;
  PointwiseLoss kind;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t rows = pred.dim(0), per_row = pred.numel() / std::max<int64_t>(rows, 1);
    Tensor d = Tensor::empty(pred.shape(), DType::Float32, dy.device());
    kernels::backend(dy.device())
        .pointwise_loss_backward(kind, pred.buffer<float>(), target.buffer<float>(), dy.buffer<float>(),
                                 d.buffer<float>(), rows, per_row);
    tape.accumulate(input_slots[0], d);
  }
};

Tensor pointwise_loss(const Tensor& pred_in, const Tensor& target_in, PointwiseLoss kind, const char* op) {
  require_float(pred_in, op, "predictions");
  require_float(target_in, op, "targets");
  require_device(target_in, pred_in, op, "targets");
  require_same_shape(pred_in, target_in, op);
  if (pred_in.rank() < 1) fail("{}: predictions need a batch axis, got a scalar", op);
  Tensor pred = pred_in.contiguous(), target = target_in.contiguous();
  int64_t rows = pred.dim(0), per_row = pred.numel() / std::max<int64_t>(rows, 1);
  Tensor loss = Tensor::empty({rows}, DType::Float32, pred.device());
  kernels::backend(pred.device())
      .pointwise_loss(kind, pred.buffer<float>(), target.buffer<float>(), loss.buffer<float>(), rows, per_row);
  if (auto* tape = autograd::tracking_tape({&pred_in})) {
    auto* node = new PointwiseLossNode();
    node->pred = pred;
    node->target = target;
    node->kind = kind;
    autograd::record(tape, node, {&pred_in}, loss);
  }
  return loss;
}

}  // namespace

Tensor mean_squared_error(const Tensor& pred, const Tensor& target) {
  return pointwise_loss(pred, target, PointwiseLoss::SquaredError, "mean_squared_error");
}

Tensor binary_cross_entropy(const Tensor& x, const Tensor& targets, bool from_logits) {
  return pointwise_loss(x, targets,
                        from_logits ? PointwiseLoss::BinaryCrossEntropyLogits : PointwiseLoss::BinaryCrossEntropy,
                        "binary_crossentropy");
}

}  // namespace tandem::ops
