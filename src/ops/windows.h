#pragma once
// The checks and shapes of the convolution and the pools, shared by the ops that compute them
// (conv2d, max_pool2d, avg_pool2d) and by the one that fuses a ReLU convolution with max pooling.
#include "ops/checks.h"

namespace tandem::ops {

// A convolution's shape from its arguments, each checked (the failure names the op "conv2d", the
// argument, and the expected and actual values); ReLU is fused into the convolution.
kernels::Conv2dShape conv2d_shape_of(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t stride_h,
                                     int64_t stride_w, Padding padding, Activation act);
// A pool's shape over n × h × w × c inputs, its window and strides checked (failures name `op`).
kernels::Pool2dShape pool2d_shape_of(int64_t n, int64_t h, int64_t w, int64_t c, kernels::PoolKind kind, int64_t ph,
                                     int64_t pw, int64_t sh, int64_t sw, Padding padding, const char* op);

}  // namespace tandem::ops
