#include "tandem/autograd.h"
#include "tandem/layers.h"

namespace tandem::layers {

std::string Layer::label() const { return fmt::format("{} \"{}\"", type(), name_.empty() ? default_name() : name_); }

Shape Layer::build(const Shape& input_shape, uint64_t seed) {
  if (built_) {
    if (!(input_shape == input_shape_))
      fail("{}: already built for inputs of shape {}, got {}", label(), input_shape_.str_with_batch(),
           input_shape.str_with_batch());
    return output_shape_;
  }
  if (declared_input_shape_ && !(*declared_input_shape_ == input_shape))
    fail("{}: declared input_shape {} but receives {}", label(), declared_input_shape_->str(), input_shape.str());
  variables_.clear();
  input_shape_ = input_shape;
  output_shape_ = do_build(input_shape, seed);
  built_ = true;
  return output_shape_;
}

std::shared_ptr<Layer> Layer::replicate() const {
  std::shared_ptr<Layer> copy = clone();
  for (Variable& v : copy->variables_) {
    v.value = v.value.clone();
    mark_trainable(v.value, v.trainable);
  }
  return copy;
}

int64_t Layer::count_params() const {
  int64_t n = 0;
  for (const Variable& v : variables_) n += v.value.numel();
  return n;
}

void Layer::call_parts(BatchParts& parts) {
  for (size_t i = 0; i < parts.h.size(); ++i) {
    parts.use_part(i);
    parts.h[i] = call(parts.h[i], parts.contexts[i]);
  }
}

void Layer::place_on(Device device) {
  check_device(device, label().c_str());
  for (Variable& v : variables_) {
    v.value = v.value.to(device);
    mark_trainable(v.value, v.trainable);
  }
  device_ = device;
}

Tensor call_layers(std::span<const std::shared_ptr<Layer>> layers, const Tensor& x, const CallContext& ctx) {
  if (!x.defined()) fail("call_layers: the input is undefined");
  Tensor h = x;
  for (const auto& layer : layers) {
    if (!layer->device()) {
      h = layer->call(ops::to_device(h, x.device()), ctx);
      continue;
    }
    ComputeOn on(*layer->device());
    h = layer->call(ops::to_device(h, *layer->device()), ctx);
  }
  return ops::to_device(h, x.device());
}

Tensor& Layer::add_variable(const std::string& short_name, const Shape& shape, const Initializer& init, int64_t fan_in,
                            int64_t fan_out, uint64_t seed, bool trainable) {
  Tensor t = Tensor::empty(shape);
  init.fill(t, fan_in, fan_out, Philox(seed, variables_.size()));
  if (device_) t = t.to(*device_);
  mark_trainable(t, trainable);
  variables_.push_back(Variable{name_ + "/" + short_name, t, trainable});
  return variables_.back().value;
}

void Layer::check_input(const Tensor& x) const {
  if (!built_) fail("{}: called before it was built", label());
  if (!x.defined()) fail("{}: input is undefined", label());
  bool ok = x.rank() == input_shape_.rank() + 1;
  for (int i = 0; ok && i < input_shape_.rank(); ++i) ok = x.dim(i + 1) == input_shape_[i];
  if (!ok) {
    Shape per_sample;
    for (int i = 1; i < x.rank(); ++i) per_sample.push_back(x.dim(i));
    if (input_shape_.rank() == 1 && per_sample.rank() == 1)
      fail("{}: input has {} features, expected {}", label(), per_sample[0], input_shape_[0]);
    fail("{}: expected inputs of shape {}, got {}", label(), input_shape_.str_with_batch(), x.shape().str());
  }
  if (x.dtype() != DType::Float32) fail("{}: input must be float32, got {}", label(), dtype_name(x.dtype()));
}

}  // namespace tandem::layers
