// scale, square, log, clip: x:(…) -> (…) elementwise.
// backward: factor·dy; 2x·dy; dy/x; dy inside [low, high] and 0 outside.
#include <algorithm>
#include <cmath>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

enum class UnaryKind { Scale, Square, Log, Clip };

struct UnaryNode : autograd::Node {
  Tensor x;
  float factor, low, high;
  UnaryKind kind;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    Tensor dx = Tensor::empty(dy.shape());
    const float* g = dy.data<float>();
    float* d = dx.data<float>();
    const float* px = x.defined() ? x.data<float>() : nullptr;
    for (int64_t i = 0, n = dy.numel(); i < n; ++i)
      d[i] = kind == UnaryKind::Scale    ? factor * g[i]
             : kind == UnaryKind::Square ? 2.0f * px[i] * g[i]
             : kind == UnaryKind::Log    ? g[i] / px[i]
                                         : (px[i] >= low && px[i] <= high ? g[i] : 0.0f);
    tape.accumulate(input_slots[0], dx);
  }
};

Tensor unary(const Tensor& x_in, UnaryKind kind, float factor, const char* name, float low = 0.0f, float high = 0.0f) {
  require_float(x_in, name, "x");
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i)
    py[i] = kind == UnaryKind::Scale    ? factor * px[i]
            : kind == UnaryKind::Square ? px[i] * px[i]
            : kind == UnaryKind::Log    ? std::log(px[i])
                                        : std::min(std::max(px[i], low), high);
  if (auto* tape = autograd::tracking_tape({&x_in})) {
    auto* node = new UnaryNode();
    if (kind != UnaryKind::Scale) node->x = x;
    node->factor = factor;
    node->low = low;
    node->high = high;
    node->kind = kind;
    autograd::record(tape, node, {&x_in}, y);
  }
  return y;
}

}  // namespace

Tensor scale(const Tensor& x, float factor) { return unary(x, UnaryKind::Scale, factor, "scale"); }
Tensor square(const Tensor& x) { return unary(x, UnaryKind::Square, 0.0f, "square"); }
Tensor log(const Tensor& x) { return unary(x, UnaryKind::Log, 0.0f, "log"); }
Tensor clip(const Tensor& x, float low, float high) {
  if (!(low <= high)) fail("clip: low {} exceeds high {}", low, high);
  return unary(x, UnaryKind::Clip, 0.0f, "clip", low, high);
}

}  // namespace tandem::ops
