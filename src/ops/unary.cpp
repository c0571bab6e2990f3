// scale, square, log, clip: x:(…) -> (…) elementwise.
// backward: factor·dy; 2x·dy; dy/x; dy inside [low, high] and 0 outside.
#include "ops/checks.h"

namespace tandem::ops {
namespace {

using kernels::UnaryKind;

struct UnaryNode : autograd::Node {
  Tensor x;
  float factor, low, high;
  UnaryKind kind;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    Tensor dx = Tensor::empty(dy.shape(), DType::Float32, dy.device());
    kernels::backend(dy.device())
        .unary_backward(kind, x.defined() ? x.buffer<float>() : nullptr, dy.buffer<float>(), dx.buffer<float>(),
                        dy.numel(), factor, low, high);
    tape.accumulate(input_slots[0], dx);
  }
};

Tensor unary(const Tensor& x_in, UnaryKind kind, float factor, const char* name, float low = 0.0f, float high = 0.0f) {
  require_float(x_in, name, "x");
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::Float32, x.device());
  kernels::backend(x.device()).unary(kind, x.buffer<float>(), y.buffer<float>(), x.numel(), factor, low, high);
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
