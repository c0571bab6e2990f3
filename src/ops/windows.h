#pragma once
// The convolution's and the pools' forward and backward, for the ops that record them (conv2d,
// max_pool2d, avg_pool2d) and for the one that fuses a ReLU convolution with max pooling.
#include "ops/checks.h"

namespace tandem::ops {

// A convolution computed, with what its backward needs: y = act(conv(x) + bias); z, the
// pre-activation, only for an activation whose derivative needs it (GELU) under a tape.
struct Conv2dRun {
  Tensor x, kernel, y, z;
  Activation act = Activation::Linear;
  kernels::Conv2dShape shape;
};
Conv2dRun run_conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t stride_h, int64_t stride_w,
                     Padding padding, Activation act, bool for_tape);
// From dz, the gradient of conv(x) + bias (the activation's derivative already applied): the
// gradients of x, the kernel and the bias, into the node's slots 0, 1 and 2 where it needs them.
void conv2d_gradients(const Conv2dRun& run, const Tensor& dz, const autograd::Node& node, GradientTape& tape);

// A pooling computed, with its workspace (max: each maximum's window index).
struct Pool2dRun {
  Tensor y, workspace;
  kernels::Pool2dShape shape;
};
Pool2dRun run_pool2d(const Tensor& x, kernels::PoolKind kind, int64_t ph, int64_t pw, int64_t sh, int64_t sw,
                     Padding padding, const char* op);
// The gradient of the pooling's input from its output's, dy.
Tensor pool2d_input_gradient(const Pool2dRun& run, const Tensor& dy);

}  // namespace tandem::ops
