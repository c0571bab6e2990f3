// The layers without weights: Dropout, Flatten, Activation.
#include "tandem/layers.h"

namespace tandem::layers {

Dropout::Dropout(float rate, DropoutOptions options) : Layer(options.name, options.input_shape), rate_(rate) {
  if (!(rate >= 0.0f && rate < 1.0f)) fail("{}: rate must be in [0, 1), got {}", label(), rate);
}

Shape Dropout::do_build(const Shape& input_shape, uint64_t seed) {
  salt_ = seed;
  return input_shape;
}

Tensor Dropout::call(const Tensor& x, const CallContext& ctx) {
  check_input(x);
  if (!ctx.training || rate_ == 0.0f) return x;
  RandomKey key = ctx.random;
  key.seed = mix_seed(key.seed, salt_);
  return ops::dropout(x, rate_, key);
}

Shape Flatten::do_build(const Shape& input_shape, uint64_t) { return Shape{input_shape.numel()}; }

Tensor Flatten::call(const Tensor& x, const CallContext&) {
  check_input(x);
  return ops::reshape(x, Shape{x.dim(0), output_shape_[0]});
}

Activation::Activation(const std::string& activation, ActivationOptions options)
    : Layer(options.name, options.input_shape), activation_(parse_activation(activation, label())) {}

Tensor Activation::call(const Tensor& x, const CallContext&) {
  check_input(x);
  return ops::activation(x, activation_);
}

}  // namespace tandem::layers
