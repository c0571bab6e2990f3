// mean_squared_error: pred:(B,…) target:(B,…) -> (B) = mean over non-batch axes of (pred - target)².
// backward: dpred = 2(pred - target)/m · dy.
#include <algorithm>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct MeanSquaredErrorNode : autograd::Node {
  Tensor pred, target;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t rows = pred.dim(0), per_row = pred.numel() / std::max<int64_t>(rows, 1);
    Tensor d = Tensor::empty(pred.shape());
    const float* p = pred.data<float>();
    const float* t = target.data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      float gi = 2.0f * dy.data<float>()[i] / static_cast<float>(per_row);
      for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j) d.data<float>()[j] = gi * (p[j] - t[j]);
    }
    tape.accumulate(input_slots[0], d);
  }
};

}  // namespace

Tensor mean_squared_error(const Tensor& pred_in, const Tensor& target_in) {
  const char* op = "mean_squared_error";
  require_float(pred_in, op, "predictions");
  require_float(target_in, op, "targets");
  require_same_shape(pred_in, target_in, op);
  if (pred_in.rank() < 1) fail("{}: predictions need a batch axis, got a scalar", op);
  Tensor pred = pred_in.contiguous(), target = target_in.contiguous();
  int64_t rows = pred.dim(0), per_row = pred.numel() / std::max<int64_t>(rows, 1);
  Tensor loss = Tensor::empty({rows});
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0.0;
    for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j) {
      double e = pred.data<float>()[j] - target.data<float>()[j];
      s += e * e;
    }
    loss.data<float>()[i] = static_cast<float>(s / static_cast<double>(per_row));
  }
  if (auto* tape = autograd::tracking_tape({&pred_in})) {
    auto* node = new MeanSquaredErrorNode();
    node->pred = pred;
    node->target = target;
    autograd::record(tape, node, {&pred_in}, loss);
  }
  return loss;
}

}  // namespace tandem::ops
