// conv2d_max_pool2d: max_pool2d(conv2d(x, kernel, bias, act = ReLU)) as one op, computed a chunk of
// images at a time so that the convolution's output stays in a buffer of its thread, in cache
// (kernels::cpu::conv2d_max_pool2d_forward); forward keeps the pooled output and the maxima's
// window indices.
// backward: ReLU's derivative from the pooled output (each pooled value is the convolution's
//   output where its gradient goes), the pool's backward and the convolution's, chunk by chunk:
//   the same chunks, and so the same bits, as the two ops.
#include "ops/windows.h"

namespace tandem::ops {
namespace {

struct Conv2dMaxPoolNode : autograd::Node {
  Tensor x, kernel, p, workspace;
  kernels::Conv2dShape conv;
  kernels::Pool2dShape pool;
  void backward(GradientTape& tape, const Tensor& dp_in) override {
    Tensor dp = dp_in.contiguous();
    Device device = dp.device();
    Tensor dx = needs(0) ? Tensor::empty(x.shape(), DType::Float32, device) : Tensor();
    Tensor dk = Tensor::empty(kernel.shape(), DType::Float32, device);
    Tensor db = Tensor::empty({conv.f}, DType::Float32, device);
    kernels::backend(device).conv2d_max_pool2d_backward(
        conv, pool, x.buffer<float>(), kernel.buffer<float>(), p.buffer<float>(), workspace.buffer<uint8_t>(),
        dp.buffer<float>(), dx.defined() ? dx.buffer<float>() : nullptr, dk.buffer<float>(), db.buffer<float>());
    if (needs(0)) tape.accumulate(input_slots[0], dx);
    tape.accumulate(input_slots[1], dk);
    tape.accumulate(input_slots[2], db);
  }
};

}  // namespace

Tensor conv2d_max_pool2d(const Tensor& x_in, const Tensor& kernel_in, const Tensor& bias, int64_t stride_h,
                         int64_t stride_w, Padding padding, int64_t pool_h, int64_t pool_w, int64_t pool_stride_h,
                         int64_t pool_stride_w, Padding pool_padding) {
  kernels::Conv2dShape conv = conv2d_shape_of(x_in, kernel_in, bias, stride_h, stride_w, padding, Activation::ReLU);
  kernels::Pool2dShape pool = pool2d_shape_of(conv.n, conv.oh, conv.ow, conv.f, kernels::PoolKind::Max, pool_h, pool_w,
                                              pool_stride_h, pool_stride_w, pool_padding, "conv2d_max_pool2d");
  Tensor x = x_in.contiguous(), kernel = kernel_in.contiguous();
  Device device = x.device();
  kernels::Backend& backend = kernels::backend(device);
  Tensor p = Tensor::empty({pool.n, pool.oh, pool.ow, pool.c}, DType::Float32, device);
  Tensor workspace = Tensor::empty({static_cast<int64_t>(backend.pool2d_workspace_bytes(pool))}, DType::UInt8, device);
  backend.conv2d_max_pool2d_forward(conv, pool, x.buffer<float>(), kernel.buffer<float>(),
                                    bias.defined() ? bias.contiguous().buffer<float>() : nullptr, p.buffer<float>(),
                                    workspace.buffer<uint8_t>());
  if (auto* tape = autograd::tracking_tape({&x_in, &kernel_in, &bias})) {
    auto* node = new Conv2dMaxPoolNode();
    node->x = x;
    node->kernel = kernel;
    node->p = p;
    node->workspace = workspace;
    node->conv = conv;
    node->pool = pool;
    autograd::record(tape, node, {&x_in, &kernel_in, &bias}, p);
  }
  return p;
}

}  // namespace tandem::ops
