// max_pool2d / avg_pool2d: x:(N,H,W,C) -> (N,OH,OW,C). Average pooling excludes padding (Keras).
// backward: max, each output gradient added where its window's maximum was (the workspace keeps
//   its window index); average, oneDNN's pooling backward.
#include "ops/windows.h"

namespace tandem::ops {
namespace {

struct Pool2dNode : autograd::Node {
  Pool2dRun run;
  void backward(GradientTape& tape, const Tensor& dy) override {
    tape.accumulate(input_slots[0], pool2d_input_gradient(run, dy));
  }
};

Tensor pool2d(const Tensor& x, kernels::PoolKind kind, int64_t ph, int64_t pw, int64_t sh, int64_t sw, Padding padding,
              const char* op) {
  Pool2dRun run = run_pool2d(x, kind, ph, pw, sh, sw, padding, op);
  Tensor y = run.y;
  run.y = Tensor();  // backward needs the workspace alone
  if (auto* tape = autograd::tracking_tape({&x})) {
    auto* node = new Pool2dNode();
    node->run = std::move(run);
    autograd::record(tape, node, {&x}, y);
  }
  return y;
}

}  // namespace

Pool2dRun run_pool2d(const Tensor& x_in, kernels::PoolKind kind, int64_t ph, int64_t pw, int64_t sh, int64_t sw,
                     Padding padding, const char* op) {
  require_float(x_in, op, "x");
  require_rank(x_in, 4, op, "x");
  if (ph < 1 || pw < 1 || sh < 1 || sw < 1)
    fail("{}: pool size ({}, {}) and strides ({}, {}) must be positive", op, ph, pw, sh, sw);
  Pool2dRun run;
  auto& s = run.shape;
  s = kernels::cpu::pool2d_shape(kind, x_in.dim(0), x_in.dim(1), x_in.dim(2), x_in.dim(3), ph, pw, sh, sw, padding);
  if (s.oh < 1 || s.ow < 1) fail("{}: a {}x{} window does not fit the {}x{} input", op, ph, pw, s.h, s.w);
  Tensor x = x_in.contiguous();
  kernels::Backend& backend = kernels::backend(x.device());
  run.y = Tensor::empty({s.n, s.oh, s.ow, s.c}, DType::Float32, x.device());
  size_t ws = backend.pool2d_workspace_bytes(s);
  if (ws > 0) run.workspace = Tensor::empty({static_cast<int64_t>(ws)}, DType::UInt8, x.device());
  backend.pool2d_forward(s, x.buffer<float>(), run.y.buffer<float>(),
                         run.workspace.defined() ? run.workspace.buffer<uint8_t>() : nullptr);
  return run;
}

Tensor pool2d_input_gradient(const Pool2dRun& run, const Tensor& dy_in) {
  const auto& s = run.shape;
  Tensor dy = dy_in.contiguous();
  Tensor dx = Tensor::empty({s.n, s.h, s.w, s.c}, DType::Float32, dy.device());
  kernels::backend(dy.device())
      .pool2d_backward(s, dy.buffer<float>(), run.workspace.defined() ? run.workspace.buffer<uint8_t>() : nullptr,
                       dx.buffer<float>());
  return dx;
}

Tensor max_pool2d(const Tensor& x, int64_t ph, int64_t pw, int64_t sh, int64_t sw, Padding padding) {
  return pool2d(x, kernels::PoolKind::Max, ph, pw, sh, sw, padding, "max_pool2d");
}

Tensor avg_pool2d(const Tensor& x, int64_t ph, int64_t pw, int64_t sh, int64_t sw, Padding padding) {
  return pool2d(x, kernels::PoolKind::Average, ph, pw, sh, sw, padding, "avg_pool2d");
}

}  // namespace tandem::ops
