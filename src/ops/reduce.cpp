// sum, mean: x:(…) -> () scalar. backward: dy (÷ n for mean) broadcast to x's shape.
#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct ReduceNode : autograd::Node {
  Shape shape;
  float factor;
  void backward(GradientTape& tape, const Tensor& dy) override {
    tape.accumulate(input_slots[0], Tensor::full(shape, dy.item() * factor, dy.device()));
  }
};

Tensor reduce(const Tensor& x_in, bool average, const char* name) {
  require_float(x_in, name, "x");
  Tensor x = x_in.contiguous();
  int64_t n = x.numel();
  if (average && n == 0) fail("mean: tensor of shape {} has no elements", x.shape().str());
  // Double accumulation: a loss summed over a batch should not depend on order much.
  double s = kernels::backend(x.device()).sum(x.buffer<float>(), n);
  float factor = average ? 1.0f / static_cast<float>(n) : 1.0f;
  Tensor y = Tensor::full(Shape{}, static_cast<float>(average ? s / static_cast<double>(n) : s), x.device());
  if (auto* tape = autograd::tracking_tape({&x_in})) {
    auto* node = new ReduceNode();
    node->shape = x.shape();
    node->factor = factor;
    autograd::record(tape, node, {&x_in}, y);
  }
  return y;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce(x, false, "sum"); }
Tensor mean(const Tensor& x) { return reduce(x, true, "mean"); }

}  // namespace tandem::ops
