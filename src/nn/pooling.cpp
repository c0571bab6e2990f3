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

namespace tandem::layers {

Shape GlobalAveragePooling2D::do_build(const Shape& input_shape, uint64_t) {
  if (input_shape.rank() != 3)
    fail("{}: expects inputs of shape (None, height, width, channels), got {}", label(), input_shape.str_with_batch());
  return keepdims_ ? Shape{1, 1, input_shape[2]} : Shape{input_shape[2]};
}

Tensor GlobalAveragePooling2D::call(const Tensor& x, const CallContext&) {
  check_input(x);
  Tensor y = ops::avg_pool2d(x, x.dim(1), x.dim(2), x.dim(1), x.dim(2), Padding::Valid);
  return keepdims_ ? y : ops::reshape(y, {x.dim(0), x.dim(3)});
}

ZeroPadding2D::ZeroPadding2D(std::array<int64_t, 4> top_bottom_left_right, ZeroPadding2DOptions options)
    : Layer(options.name, options.input_shape), padding_(top_bottom_left_right) {
  for (int64_t p : padding_)
    if (p < 0)
      fail("{}: padding must be non-negative, got ((top {}, bottom {}), (left {}, right {}))", label(), padding_[0],
           padding_[1], padding_[2], padding_[3]);
}

Shape ZeroPadding2D::do_build(const Shape& input_shape, uint64_t) {
  if (input_shape.rank() != 3)
    fail("{}: expects inputs of shape (None, height, width, channels), got {}", label(), input_shape.str_with_batch());
  return Shape{input_shape[0] + padding_[0] + padding_[1], input_shape[1] + padding_[2] + padding_[3], input_shape[2]};
}

Tensor ZeroPadding2D::call(const Tensor& x, const CallContext&) {
  check_input(x);
  return ops::zero_pad2d(x, padding_[0], padding_[1], padding_[2], padding_[3]);
}

}  // namespace tandem::layers
