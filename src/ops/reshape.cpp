// reshape: x:(…) -> same elements viewed as `shape`. backward: dy viewed as x's shape.
#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct ReshapeNode : autograd::Node {
  Shape shape;
  void backward(GradientTape& tape, const Tensor& dy) override { tape.accumulate(input_slots[0], dy.reshape(shape)); }
};

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  if (!x.defined()) fail("reshape: argument 'x' is undefined");
  Tensor y = x.reshape(shape);
  if (auto* tape = autograd::tracking_tape({&x})) {
    auto* node = new ReshapeNode();
    node->shape = x.shape();
    autograd::record(tape, node, {&x}, y);
  }
  return y;
}

}  // namespace tandem::ops
