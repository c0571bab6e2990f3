#include "tandem/layers.h"

namespace tandem::layers {

Conv2D::Conv2D(int64_t filters, Size2 kernel_size, Conv2DOptions options)
    : Layer(options.name, options.input_shape),
      filters_(filters),
      kernel_size_(kernel_size),
      options_(std::move(options)),
      padding_(parse_padding(options_.padding, label())),
      activation_(parse_activation(options_.activation, label())),
      kernel_init_(Initializer::parse(options_.kernel_initializer, label())),
      bias_init_(Initializer::parse(options_.bias_initializer, label())) {
  if (filters <= 0) fail("{}: filters must be positive, got {}", label(), filters);
  if (kernel_size.h <= 0 || kernel_size.w <= 0)
    fail("{}: kernel_size must be positive, got ({}, {})", label(), kernel_size.h, kernel_size.w);
  if (options_.strides.h <= 0 || options_.strides.w <= 0)
    fail("{}: strides must be positive, got ({}, {})", label(), options_.strides.h, options_.strides.w);
  if (activation_ == tandem::Activation::Softmax) fail("{}: softmax activation is not supported on Conv2D", label());
}

Shape Conv2D::do_build(const Shape& input_shape, uint64_t seed) {
  if (input_shape.rank() != 3)
    fail("{}: expects inputs of shape (None, height, width, channels), got {}", label(), input_shape.str_with_batch());
  int64_t c = input_shape[2];
  int64_t fan_in = kernel_size_.h * kernel_size_.w * c, fan_out = kernel_size_.h * kernel_size_.w * filters_;
  auto [oh, ow] = ops::window_output_size(input_shape[0], input_shape[1], kernel_size_.h, kernel_size_.w,
                                          options_.strides.h, options_.strides.w, padding_);
  if (oh < 1 || ow < 1)
    fail("{}: kernel {}x{} does not fit inputs of {}x{} with padding \"{}\"", label(), kernel_size_.h, kernel_size_.w,
         input_shape[0], input_shape[1], options_.padding);
  add_variable("kernel", {kernel_size_.h, kernel_size_.w, c, filters_}, kernel_init_, fan_in, fan_out, seed);
  if (options_.use_bias) add_variable("bias", {filters_}, bias_init_, fan_in, fan_out, seed);
  return Shape{oh, ow, filters_};
}

Tensor Conv2D::call(const Tensor& x, const CallContext&) {
  check_input(x);
  ops::PrecisionScope precision(precision_);
  return ops::conv2d(x, variables_[0].value, options_.use_bias ? variables_[1].value : Tensor(), options_.strides.h,
                     options_.strides.w, padding_, activation_);
}

std::optional<Tensor> Conv2D::call_with_next(const Layer& next, const Tensor& x, const CallContext&) {
  const auto* pool = dynamic_cast<const Pooling2D*>(&next);
  if (activation_ != tandem::Activation::ReLU || pool == nullptr || !pool->is_max() || !pool->built() ||
      next.device() != device())
    return std::nullopt;
  check_input(x);
  ops::PrecisionScope precision(precision_);
  return ops::conv2d_max_pool2d(x, variables_[0].value, options_.use_bias ? variables_[1].value : Tensor(),
                                options_.strides.h, options_.strides.w, padding_, pool->pool_size().h,
                                pool->pool_size().w, pool->strides().h, pool->strides().w, pool->padding());
}

}  // namespace tandem::layers
