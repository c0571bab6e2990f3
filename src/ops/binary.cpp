// add, sub, mul: a:(…) b:(…) of the same shape, or b:(C,) broadcast along a's last axis C.
// backward: da = dy (·b); db = ±dy (·a), summed over the broadcast rows.
#include "ops/checks.h"

namespace tandem::ops {
namespace {

using kernels::BinaryKind;

bool broadcasts(const Tensor& a, const Tensor& b) {
  return !(a.shape() == b.shape()) && b.rank() == 1 && a.rank() >= 1 && a.dim(-1) == b.dim(0);
}

Tensor reduce_to(const Tensor& g, const Shape& like) {
  if (g.shape() == like) return g;
  Tensor out = Tensor::empty(like, DType::Float32, g.device());
  int64_t cols = like[0];
  kernels::backend(g.device()).column_sums(g.buffer<float>(), g.numel() / cols, cols, out.buffer<float>());
  return out;
}

struct BinaryNode : autograd::Node {
  Tensor a, b;  // kept only for mul
  Shape b_shape;
  BinaryKind kind;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    if (needs(0)) tape.accumulate(input_slots[0], kind == BinaryKind::Mul ? mul(dy, b) : dy);
    if (needs(1)) {
      Tensor g = kind == BinaryKind::Add ? dy : kind == BinaryKind::Sub ? scale(dy, -1.0f) : mul(dy, a);
      tape.accumulate(input_slots[1], reduce_to(g, b_shape));
    }
  }
};

Tensor binary(const Tensor& a_in, const Tensor& b_in, BinaryKind kind, const char* name) {
  require_float(a_in, name, "a");
  require_float(b_in, name, "b");
  require_device(b_in, a_in, name, "b");
  bool bcast = broadcasts(a_in, b_in);
  if (!bcast && !(a_in.shape() == b_in.shape()))
    fail("{}: shapes {} and {} are neither equal nor (…, C) with (C,)", name, a_in.shape().str(), b_in.shape().str());
  Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor y = Tensor::empty(a.shape(), DType::Float32, a.device());
  kernels::backend(a.device())
      .binary(kind, a.buffer<float>(), b.buffer<float>(), y.buffer<float>(), a.numel(), bcast ? b.numel() : a.numel());
  if (auto* tape = autograd::tracking_tape({&a_in, &b_in})) {
    auto* node = new BinaryNode();
    if (kind == BinaryKind::Mul) {
      node->a = a;
      node->b = b;
    }
    node->b_shape = b.shape();
    node->kind = kind;
    autograd::record(tape, node, {&a_in, &b_in}, y);
  }
  return y;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryKind::Add, "add"); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryKind::Sub, "sub"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryKind::Mul, "mul"); }

}  // namespace tandem::ops
