#include "tandem/layers.h"

namespace tandem::layers {

Pooling2D::Pooling2D(bool max, Size2 pool_size, Pooling2DOptions options)
    : Layer(options.name, options.input_shape),
      max_(max),
      pool_size_(pool_size),
      strides_(options.strides.value_or(pool_size)),
      padding_(parse_padding(options.padding, label())) {
  if (pool_size.h <= 0 || pool_size.w <= 0 || strides_.h <= 0 || strides_.w <= 0)
    fail("{}: pool_size ({}, {}) and strides ({}, {}) must be positive", label(), pool_size.h, pool_size.w, strides_.h,
         strides_.w);
}

Shape Pooling2D::do_build(const Shape& input_shape, uint64_t) {
  if (input_shape.rank() != 3)
    fail("{}: expects inputs of shape (None, height, width, channels), got {}", label(), input_shape.str_with_batch());
  auto [oh, ow] = ops::window_output_size(input_shape[0], input_shape[1], pool_size_.h, pool_size_.w, strides_.h,
                                          strides_.w, padding_);
  if (oh < 1 || ow < 1)
    fail("{}: pool {}x{} does not fit inputs of {}x{}", label(), pool_size_.h, pool_size_.w, input_shape[0],
         input_shape[1]);
  return Shape{oh, ow, input_shape[2]};
}

Tensor Pooling2D::call(const Tensor& x, const CallContext&) {
  check_input(x);
  return max_ ? ops::max_pool2d(x, pool_size_.h, pool_size_.w, strides_.h, strides_.w, padding_)
              : ops::avg_pool2d(x, pool_size_.h, pool_size_.w, strides_.h, strides_.w, padding_);
}

}  // namespace tandem::layers
