// binary_cross_entropy: x:(B,…) targets:(B,…) -> (B), the mean over non-batch axes of
//   -(t·log p + (1-t)·log(1-p)), p = sigmoid(x) for logits (computed stably) or x clipped to [ε, 1-ε].
// backward: logits: (sigmoid(x) - t)/m · dy; probabilities: (p - t)/(p(1-p))/m · dy inside the clip, 0 outside.
#include <algorithm>
#include <cmath>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

constexpr float kEpsilon = 1e-7f;

struct BinaryCrossEntropyNode : autograd::Node {
  Tensor x, targets;
  bool from_logits;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t rows = x.dim(0), per_row = x.numel() / std::max<int64_t>(rows, 1);
    Tensor dx = Tensor::empty(x.shape());
    const float* px = x.data<float>();
    const float* pt = targets.data<float>();
    const float* g = dy.data<float>();
    float* d = dx.data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      float gi = g[i] / static_cast<float>(per_row);
      for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j) {
        if (from_logits) {
          d[j] = gi * (1.0f / (1.0f + std::exp(-px[j])) - pt[j]);
        } else {
          float p = px[j];
          d[j] = (p < kEpsilon || p > 1.0f - kEpsilon) ? 0.0f : gi * (p - pt[j]) / (p * (1.0f - p));
        }
      }
    }
    tape.accumulate(input_slots[0], dx);
  }
};

}  // namespace

Tensor binary_cross_entropy(const Tensor& x_in, const Tensor& targets_in, bool from_logits) {
  const char* op = "binary_crossentropy";
  require_float(x_in, op, "predictions");
  require_float(targets_in, op, "targets");
  require_same_shape(x_in, targets_in, op);
  if (x_in.rank() < 1) fail("{}: predictions need a batch axis, got a scalar", op);
  Tensor x = x_in.contiguous(), t = targets_in.contiguous();
  int64_t rows = x.dim(0), per_row = x.numel() / std::max<int64_t>(rows, 1);
  Tensor loss = Tensor::empty({rows});
  const float* px = x.data<float>();
  const float* pt = t.data<float>();
  float* pl = loss.data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0.0;
    for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j) {
      if (from_logits) {
        // max(x,0) - x·t + log(1 + exp(-|x|)): no overflow for large |x|.
        s += std::max(px[j], 0.0f) - px[j] * pt[j] + std::log1p(std::exp(-std::fabs(px[j])));
      } else {
        float p = std::clamp(px[j], kEpsilon, 1.0f - kEpsilon);
        s += -(pt[j] * std::log(p) + (1.0f - pt[j]) * std::log(1.0f - p));
      }
    }
    pl[i] = static_cast<float>(s / static_cast<double>(per_row));
  }
  if (auto* tape = autograd::tracking_tape({&x_in})) {
    auto* node = new BinaryCrossEntropyNode();
    node->x = x;
    node->targets = t;
    node->from_logits = from_logits;
    autograd::record(tape, node, {&x_in}, loss);
  }
  return loss;
}

}  // namespace tandem::ops
