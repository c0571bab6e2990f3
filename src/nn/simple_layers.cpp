// The layers without weights: Dropout, Flatten, Activation.
#include "tandem/layers.h"

namespace tandem::layers {

Dropout::Dropout(float rate, DropoutOptions options)
    : Layer(options.name, options.input_shape), rate_(rate), seed_(options.seed) {
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
  key.seed = seed_ ? mix_seed(*seed_, 0x44726f706f7574) : mix_seed(key.seed, salt_);  // its own seed: "Dropout"
  key.feature_offset = feature_offset_;
  key.features = features_;
  return ops::dropout(x, rate_, key);
}

std::shared_ptr<Layer> Dropout::on_feature_slice(int64_t offset, int64_t width, int64_t features) const {
  if (input_shape_.rank() != 1) return nullptr;
  auto slice = std::make_shared<Dropout>(*this);
  slice->input_shape_ = slice->output_shape_ = Shape{width};
  slice->feature_offset_ = offset;
  slice->features_ = features;
  return slice;
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

std::shared_ptr<Layer> Activation::on_feature_slice(int64_t, int64_t width, int64_t) const {
  if (activation_ == tandem::Activation::Softmax || input_shape_.rank() != 1) return nullptr;  // needs whole rows
  auto slice = std::make_shared<Activation>(*this);
  slice->input_shape_ = slice->output_shape_ = Shape{width};
  return slice;
}

}  // namespace tandem::layers
