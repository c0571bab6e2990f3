// conv2d_max_pool2d: max_pool2d(conv2d(x, kernel, bias, act = ReLU)) as one op. Forward computes
// both and keeps the pooled output and the maxima's window indices, not the convolution's output.
// backward: ReLU's derivative applied to the pooled gradient, where the pooled value is positive
//   (each pooled value is the convolution's output where its gradient goes), then the pool's
//   backward and the convolution's: the same bits as the two ops, without a pass over the
//   convolution's output.
#include "ops/windows.h"

namespace tandem::ops {
namespace {

struct Conv2dMaxPoolNode : autograd::Node {
  Conv2dRun conv;
  Pool2dRun pool;
  void backward(GradientTape& tape, const Tensor& dp_in) override {
    Tensor dp = dp_in.contiguous();
    Tensor masked = Tensor::empty(dp.shape(), DType::Float32, dp.device());
    kernels::backend(dp.device())
        .activation_backward(dp.buffer<float>(), nullptr, pool.y.buffer<float>(), masked.buffer<float>(),
                             dp.numel() / pool.shape.c, pool.shape.c, Activation::ReLU);
    conv2d_gradients(conv, pool2d_input_gradient(pool, masked), *this, tape);
  }
};

}  // namespace

Tensor conv2d_max_pool2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t stride_h, int64_t stride_w,
                         Padding padding, int64_t pool_h, int64_t pool_w, int64_t pool_stride_h, int64_t pool_stride_w,
                         Padding pool_padding) {
  GradientTape* tape = autograd::tracking_tape({&x, &kernel, &bias});
  Conv2dRun conv = run_conv2d(x, kernel, bias, stride_h, stride_w, padding, Activation::ReLU, tape != nullptr);
  Pool2dRun pool = run_pool2d(conv.y, kernels::PoolKind::Max, pool_h, pool_w, pool_stride_h, pool_stride_w,
                              pool_padding, "conv2d_max_pool2d");
  conv.y = Tensor();  // backward reads the pooled output instead
  Tensor p = pool.y;
  if (tape) {
    auto* node = new Conv2dMaxPoolNode();
    node->conv = std::move(conv);
    node->pool = std::move(pool);
    autograd::record(tape, node, {&x, &kernel, &bias}, p);
  }
  return p;
}

}  // namespace tandem::ops
