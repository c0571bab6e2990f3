// max_pool2d / avg_pool2d: x:(N,H,W,C) -> (N,OH,OW,C). Average pooling excludes padding (Keras).
// backward: max, each output gradient added where its window's maximum was (the workspace keeps
//   its window index); average, oneDNN's pooling backward.
#include "ops/windows.h"

namespace tandem::ops {
namespace {

struct Pool2dNode : autograd::Node {
  Shape x_shape;
  Tensor workspace;
  kernels::Pool2dShape shape;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    Tensor dx = Tensor::empty(x_shape, DType::Float32, dy.device());
    kernels::backend(dy.device())
        .pool2d_backward(shape, dy.buffer<float>(), workspace.defined() ? workspace.buffer<uint8_t>() : nullptr,
                         dx.buffer<float>());
    tape.accumulate(input_slots[0], dx);
  }
};

Tensor pool2d(const Tensor& x_in, kernels::PoolKind kind, int64_t ph, int64_t pw, int64_t sh, int64_t sw,
              Padding padding, const char* op) {
  require_float(x_in, op, "x");
  require_rank(x_in, 4, op, "x");
  auto s = pool2d_shape_of(x_in.dim(0), x_in.dim(1), x_in.dim(2), x_in.dim(3), kind, ph, pw, sh, sw, padding, op);
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({s.n, s.oh, s.ow, s.c}, DType::Float32, x.device());
  Tensor workspace;
  size_t ws = kernels::backend(x.device()).pool2d_workspace_bytes(s);
  if (ws > 0) workspace = Tensor::empty({static_cast<int64_t>(ws)}, DType::UInt8, x.device());
  kernels::backend(x.device())
      .pool2d_forward(s, x.buffer<float>(), y.buffer<float>(),
                      workspace.defined() ? workspace.buffer<uint8_t>() : nullptr);
  if (auto* tape = autograd::tracking_tape({&x_in})) {
    auto* node = new Pool2dNode();
    node->x_shape = x.shape();
    node->workspace = workspace;
    node->shape = s;
    autograd::record(tape, node, {&x_in}, y);
  }
  return y;
}

}  // namespace

kernels::Pool2dShape pool2d_shape_of(int64_t n, int64_t h, int64_t w, int64_t c, kernels::PoolKind kind, int64_t ph,
                                     int64_t pw, int64_t sh, int64_t sw, Padding padding, const char* op) {
  if (ph < 1 || pw < 1 || sh < 1 || sw < 1)
    fail("{}: pool size ({}, {}) and strides ({}, {}) must be positive", op, ph, pw, sh, sw);
  auto s = kernels::pool2d_shape(kind, n, h, w, c, ph, pw, sh, sw, padding);
  if (s.oh < 1 || s.ow < 1) fail("{}: a {}x{} window does not fit the {}x{} input", op, ph, pw, s.h, s.w);
  return s;
}

Tensor max_pool2d(const Tensor& x, int64_t ph, int64_t pw, int64_t sh, int64_t sw, Padding padding) {
  return pool2d(x, kernels::PoolKind::Max, ph, pw, sh, sw, padding, "max_pool2d");
}

Tensor avg_pool2d(const Tensor& x, int64_t ph, int64_t pw, int64_t sh, int64_t sw, Padding padding) {
  return pool2d(x, kernels::PoolKind::Average, ph, pw, sh, sw, padding, "avg_pool2d");
}

}  // namespace tandem::ops
