// scale, square, log, clip, abs: x:(…) -> (…) elementwise.
// backward: factor·dy; 2x·dy; dy/x; dy inside [low, high] and 0 outside; sign(x)·dy.
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
Tensor abs(const Tensor& x) { return unary(x, UnaryKind::Abs, 0.0f, "abs"); }

Tensor penalty(const Tensor& x, const Regularizer& r) {
  Tensor total;
  if (r.l1 != 0.0f) total = scale(sum(abs(x)), r.l1);
  if (r.l2 != 0.0f) {
    Tensor l2 = scale(sum(square(x)), r.l2);
    total = total.defined() ? add(total, l2) : l2;
  }
  return total.defined() ? total : Tensor::zeros({}, DType::Float32, x.device());
}

Tensor penalties(std::span<Variable* const> variables) {
  Tensor total;
  for (Variable* v : variables)
    if (v->regularizer.any()) {
      Tensor p = penalty(v->value, v->regularizer);
      total = total.defined() ? add(total, to_device(p, total.device())) : p;
    }
  return total;
}

Tensor row_penalties(const Tensor& x, const Regularizer& r) {
  int64_t rows = x.rank() > 0 ? x.dim(0) : 0;
  if (rows == 0 || !r.any()) return Tensor::zeros({rows}, DType::Float32, x.device());
  Tensor flat = reshape(x, {rows, x.numel() / rows}), terms;
  if (r.l1 != 0.0f) terms = scale(abs(flat), r.l1);
  if (r.l2 != 0.0f) {
    Tensor l2 = scale(square(flat), r.l2);
    terms = terms.defined() ? add(terms, l2) : l2;
  }
  return reshape(matmul(terms, Tensor::full({flat.dim(1), 1}, 1.0f, x.device())), {rows});
}

Tensor penalty_gradient(const Tensor& x_in, const Regularizer& r) {
  StopRecording no_tape;
  Tensor x = x_in.contiguous();
  Tensor out = r.l2 != 0.0f ? scale(x, 2.0f * r.l2) : Tensor::zeros(x.shape(), DType::Float32, x.device());
  if (r.l1 != 0.0f) {
    Tensor sign = Tensor::empty(x.shape(), DType::Float32, x.device());
    Tensor l1 = Tensor::full(x.shape(), r.l1, x.device());
    kernels::backend(x.device())
        .unary_backward(UnaryKind::Abs, x.buffer<float>(), l1.buffer<float>(), sign.buffer<float>(), x.numel(), 0.0f,
                        0.0f, 0.0f);
    out = add(out, sign);
  }
  return out;
}

}  // namespace tandem::ops
