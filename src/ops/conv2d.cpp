// conv2d: x:(N,H,W,C) kernel:(KH,KW,C,F) bias:(F) -> y = act(conv(x) + bias):(N,OH,OW,F), oneDNN
//   convolution with ReLU as its post-op; other activations in one pass over y in place.
// backward: dz = dy·act'(…) from y (z for GELU); dx through backward-data, dkernel and dbias
//   through backward-weights.
#include "ops/windows.h"

namespace tandem::ops {
namespace {

struct Conv2dNode : autograd::Node {
  Tensor x, kernel, y, z;
  Activation act;
  kernels::Conv2dShape shape;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    if (act != Activation::Linear) {
      Tensor dz = Tensor::empty(dy.shape(), DType::Float32, dy.device());
      kernels::backend(dy.device())
          .activation_backward(dy.buffer<float>(), z.defined() ? z.buffer<float>() : nullptr, y.buffer<float>(),
                               dz.buffer<float>(), dy.numel() / shape.f, shape.f, act);
      dy = dz;
    }
    if (needs(0)) {
      Tensor dx = Tensor::empty(x.shape(), DType::Float32, dy.device());
      kernels::backend(dy.device())
          .conv2d_backward_data(shape, dy.buffer<float>(), kernel.buffer<float>(), dx.buffer<float>());
      tape.accumulate(input_slots[0], dx);
    }
    if (needs(1) || needs(2)) {
      Tensor dk = Tensor::empty(kernel.shape(), DType::Float32, dy.device());
      Tensor db = Tensor::empty({shape.f}, DType::Float32, dy.device());
      kernels::backend(dy.device())
          .conv2d_backward_weights(shape, x.buffer<float>(), dy.buffer<float>(), dk.buffer<float>(),
                                   db.buffer<float>());
      tape.accumulate(input_slots[1], dk);
      tape.accumulate(input_slots[2], db);
    }
  }
};

}  // namespace

kernels::Conv2dShape conv2d_shape_of(const Tensor& x_in, const Tensor& kernel_in, const Tensor& bias, int64_t stride_h,
                                     int64_t stride_w, Padding padding, Activation act) {
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
  auto s = kernels::conv2d_shape(x_in.dim(0), x_in.dim(1), x_in.dim(2), x_in.dim(3), kernel_in.dim(0), kernel_in.dim(1),
                                 kernel_in.dim(3), stride_h, stride_w, padding);
  if (s.oh < 1 || s.ow < 1)
    fail("conv2d: a {}x{} kernel does not fit the {}x{} input with 'valid' padding", s.kh, s.kw, s.h, s.w);
  s.fused_relu = act == Activation::ReLU;
  // Backward's products too (the node keeps the shape). Over fewer than 16 input channels the
  // products stay float32: oneDNN's bf16 convolutions are slower there (the cnn preset's first
  // layer, 1 channel, as ONEDNN_VERBOSE timed each call: forward 0.18 against 0.11 ms, backward-weights
  // 0.23 against 0.14 ms).
  s.bf16 = s.c >= 16 && products_in_bf16(x_in.device());
  return s;
}

Tensor conv2d(const Tensor& x_in, const Tensor& kernel_in, const Tensor& bias, int64_t stride_h, int64_t stride_w,
              Padding padding, Activation act) {
  auto s = conv2d_shape_of(x_in, kernel_in, bias, stride_h, stride_w, padding, act);
  Tensor x = x_in.contiguous(), kernel = kernel_in.contiguous();
  Tensor y = Tensor::empty({s.n, s.oh, s.ow, s.f}, DType::Float32, x.device());
  kernels::backend(x.device())
      .conv2d_forward(s, x.buffer<float>(), kernel.buffer<float>(),
                      bias.defined() ? bias.contiguous().buffer<float>() : nullptr, y.buffer<float>());
  GradientTape* tape = autograd::tracking_tape({&x_in, &kernel_in, &bias});
  Tensor z;
  if (!s.fused_relu && act != Activation::Linear) {
    if (tape && kernels::activation_backward_needs_input(act)) z = y.clone();
    kernels::backend(x.device()).bias_activation(y.buffer<float>(), nullptr, y.numel() / s.f, s.f, act);
  }
  if (tape) {
    auto* node = new Conv2dNode();
    node->x = x;
    node->kernel = kernel;
    node->y = y;
    node->z = z;
    node->act = act;
    node->shape = s;
    autograd::record(tape, node, {&x_in, &kernel_in, &bias}, y);
  }
  return y;
}

std::pair<int64_t, int64_t> window_output_size(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                               Padding padding) {
  auto s = kernels::conv2d_shape(1, h, w, 1, kh, kw, 1, sh, sw, padding);
  return {s.oh, s.ow};
}

}  // namespace tandem::ops
