// conv2d: x:(N,H,W,C) kernel:(KH,KW,C,F) bias:(F) -> y = act(conv(x) + bias):(N,OH,OW,F), oneDNN
//   convolution with ReLU as its post-op; other activations in one pass over y in place.
// backward: dz = dy·act'(…) from y (z for GELU); dx through backward-data, dkernel and dbias
//   through backward-weights.
#include "ops/windows.h"

namespace tandem::ops {
namespace {

struct Conv2dNode : autograd::Node {
  Conv2dRun run;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    if (run.act != Activation::Linear) {
      Tensor dz = Tensor::empty(dy.shape(), DType::Float32, dy.device());
      kernels::backend(dy.device())
          .activation_backward(dy.buffer<float>(), run.z.defined() ? run.z.buffer<float>() : nullptr,
                               run.y.buffer<float>(), dz.buffer<float>(), dy.numel() / run.shape.f, run.shape.f,
                               run.act);
      dy = dz;
    }
    conv2d_gradients(run, dy, *this, tape);
  }
};

}  // namespace

void conv2d_gradients(const Conv2dRun& run, const Tensor& dz, const autograd::Node& node, GradientTape& tape) {
  kernels::Backend& backend = kernels::backend(dz.device());
  if (node.needs(0)) {
    Tensor dx = Tensor::empty(run.x.shape(), DType::Float32, dz.device());
    backend.conv2d_backward_data(run.shape, dz.buffer<float>(), run.kernel.buffer<float>(), dx.buffer<float>());
    tape.accumulate(node.input_slots[0], dx);
  }
  if (node.needs(1) || node.needs(2)) {
    Tensor dk = Tensor::empty(run.kernel.shape(), DType::Float32, dz.device());
    Tensor db = Tensor::empty({run.shape.f}, DType::Float32, dz.device());
    backend.conv2d_backward_weights(run.shape, run.x.buffer<float>(), dz.buffer<float>(), dk.buffer<float>(),
                                    db.buffer<float>());
    tape.accumulate(node.input_slots[1], dk);
    tape.accumulate(node.input_slots[2], db);
  }
}

Conv2dRun run_conv2d(const Tensor& x_in, const Tensor& kernel_in, const Tensor& bias, int64_t stride_h,
                     int64_t stride_w, Padding padding, Activation act, bool for_tape) {
  const char* op = "conv2d";
  require_float(x_in, op, "x");
  require_float(kernel_in, op, "kernel");
  require_device(kernel_in, x_in, op, "kernel");
  require_device(bias, x_in, op, "bias");
  require_rank(x_in, 4, op, "x");
  require_rank(kernel_in, 4, op, "kernel");
  if (x_in.dim(3) != kernel_in.dim(2))
    fail("conv2d: input has {} channels, kernel expects {} (x {}, kernel {})", x_in.dim(3), kernel_in.dim(2),
         x_in.shape().str(), kernel_in.shape().str());
  if (act == Activation::Softmax) fail("conv2d: softmax is not a supported activation for a convolution");
  if (stride_h < 1 || stride_w < 1) fail("conv2d: strides must be positive, got ({}, {})", stride_h, stride_w);
  if (bias.defined()) {
    require_float(bias, op, "bias");
    if (bias.rank() != 1 || bias.dim(0) != kernel_in.dim(3))
      fail("conv2d: bias has shape {}, expected ({},)", bias.shape().str(), kernel_in.dim(3));
  }
  Conv2dRun run;
  auto& s = run.shape;
  s = kernels::cpu::conv2d_shape(x_in.dim(0), x_in.dim(1), x_in.dim(2), x_in.dim(3), kernel_in.dim(0), kernel_in.dim(1),
                                 kernel_in.dim(3), stride_h, stride_w, padding);
  if (s.oh < 1 || s.ow < 1)
    fail("conv2d: a {}x{} kernel does not fit the {}x{} input with 'valid' padding", s.kh, s.kw, s.h, s.w);
  s.fused_relu = act == Activation::ReLU;
  // Backward's products too (the run keeps the shape). Over fewer than 16 input channels the
  // products stay float32: oneDNN's bf16 convolutions are slower there (the cnn preset's first
  // layer, 1 channel, as ONEDNN_VERBOSE timed each call: forward 0.18 against 0.11 ms, backward-weights
  // 0.23 against 0.14 ms).
  s.bf16 = s.c >= 16 && products_in_bf16(x_in.device());
  run.act = act;
  run.x = x_in.contiguous();
  run.kernel = kernel_in.contiguous();
  run.y = Tensor::empty({s.n, s.oh, s.ow, s.f}, DType::Float32, run.x.device());
  kernels::Backend& backend = kernels::backend(run.x.device());
  backend.conv2d_forward(s, run.x.buffer<float>(), run.kernel.buffer<float>(),
                         bias.defined() ? bias.contiguous().buffer<float>() : nullptr, run.y.buffer<float>());
  if (!s.fused_relu && act != Activation::Linear) {
    if (for_tape && kernels::cpu::activation_backward_needs_input(act)) run.z = run.y.clone();
    backend.bias_activation(run.y.buffer<float>(), nullptr, run.y.numel() / s.f, s.f, act);
  }
  return run;
}

Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t stride_h, int64_t stride_w,
              Padding padding, Activation act) {
  GradientTape* tape = autograd::tracking_tape({&x, &kernel, &bias});
  Conv2dRun run = run_conv2d(x, kernel, bias, stride_h, stride_w, padding, act, tape != nullptr);
  Tensor y = run.y;
  if (tape) {
    auto* node = new Conv2dNode();
    node->run = std::move(run);
    autograd::record(tape, node, {&x, &kernel, &bias}, y);
  }
  return y;
}

std::pair<int64_t, int64_t> window_output_size(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                               Padding padding) {
  auto s = kernels::cpu::conv2d_shape(1, h, w, 1, kh, kw, 1, sh, sw, padding);
  return {s.oh, s.ow};
}

}  // namespace tandem::ops
