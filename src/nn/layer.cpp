#include "tandem/autograd.h"
#include "tandem/layers.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

namespace tandem {
namespace {

std::atomic<ops::Precision> global_precision{ops::Precision::Float32};

const char* policy_name(ops::Precision p) { return p == ops::Precision::MixedBFloat16 ? "mixed_bfloat16" : "float32"; }

ops::Precision precision_of(const std::string& name, const char* what) {
  if (name == "float32") return ops::Precision::Float32;
  if (name == "mixed_bfloat16") {
    static std::atomic<bool> said{false};
    if (!ops::has_bf16_products(Device::cpu()) && !said.exchange(true))
      std::fprintf(stderr,
                   "mixed_bfloat16: this CPU has no bf16 instructions (AVX512_BF16 or AMX, as oneDNN sees them); "
                   "the products stay float32\n");
    return ops::Precision::MixedBFloat16;
  }
  if (name == "mixed_float16")
    fail("{}: 'mixed_float16' is not supported: float16 products are a GPU's; use 'mixed_bfloat16' on a CPU", what);
  fail("{}: unknown dtype policy '{}' (expected 'float32' or 'mixed_bfloat16')", what, name);
}

}  // namespace

namespace mixed_precision {
void set_global_policy(const std::string& name) {
  global_precision = precision_of(name, "mixed_precision.set_global_policy");
}
std::string global_policy() { return policy_name(global_precision); }
}  // namespace mixed_precision

namespace layers {

Layer::Layer(std::string name, std::optional<Shape> input_shape)
    : name_(std::move(name)),
      declared_input_shape_(std::move(input_shape)),
      device_(placement_device()),
      precision_(global_precision) {}

std::string Layer::dtype_policy() const { return policy_name(precision_); }
void Layer::set_dtype_policy(const std::string& name) { precision_ = precision_of(name, label().c_str()); }

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
  apply_regularizers(regularizers_);  // before built_: a layer refusing its regularizers stays unbuilt
  built_ = true;
  return output_shape_;
}

void Layer::set_regularizers(const Regularizers& r) {
  for (auto [what, g] :
       {std::pair{"kernel_regularizer", r.kernel}, {"bias_regularizer", r.bias}, {"activity_regularizer", r.activity}})
    if (!(g.l1 >= 0.0f && g.l2 >= 0.0f && std::isfinite(g.l1) && std::isfinite(g.l2)))
      fail("{}: {} needs finite, non-negative l1 and l2, got l1={} l2={}", label(), what, g.l1, g.l2);
  if (built_) apply_regularizers(r);
  regularizers_ = r;
}

void Layer::apply_regularizers(const Regularizers& r) {
  auto has = [&](std::string_view suffix) {
    return std::any_of(variables_.begin(), variables_.end(),
                       [&](const Variable& v) { return v.name.ends_with(suffix); });
  };
  bool kernel = has("/kernel"), bias = has("/bias");
  if (r.kernel.any() && !kernel) fail("{}: kernel_regularizer is given, but the layer has no kernel", label());
  if (r.bias.any() && !bias)
    fail("{}: bias_regularizer is given, but the layer has no bias{}", label(),
         kernel ? " (it was made with use_bias=False)" : "");
  for (Variable& v : variables_) {  // checked: nothing changes before
    if (v.name.ends_with("/kernel")) v.regularizer = r.kernel;
    if (v.name.ends_with("/bias")) v.regularizer = r.bias;
  }
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
  for (size_t i = 0; i < layers.size(); ++i) {
    Layer& layer = *layers[i];
    std::optional<ComputeOn> on;
    if (layer.device()) on.emplace(*layer.device());
    h = ops::to_device(h, layer.device().value_or(x.device()));
    std::optional<Tensor> fused;  // not past a layer whose output has a penalty
    if (i + 1 < layers.size() && !layer.regularizers().activity.any())
      fused = layer.call_with_next(*layers[i + 1], h, ctx);
    if (fused) ++i;
    h = fused ? *fused : layer.call(h, ctx);
    add_activity_penalty(fused ? *layers[i] : layer, h, ctx, x.device());
  }
  return ops::to_device(h, x.device());
}

void add_activity_penalty(const Layer& layer, const Tensor& output, const CallContext& ctx, Device device) {
  const Regularizer& r = layer.regularizers().activity;
  if (!r.any()) return;
  if (ctx.penalties == nullptr) {
    if (ctx.training)
      fail(
          "{}: activity_regularizer: this strategy's step does not add a layer's penalty to the loss (its "
          "layers run in separate stages); use a data-parallel strategy, or no activity_regularizer",
          layer.label());
    return;
  }
  ctx.penalties->push_back(ops::to_device(ops::row_penalties(output, r), device));
}

Tensor& Layer::add_variable(const std::string& short_name, const Shape& shape, const Initializer& init, int64_t fan_in,
                            int64_t fan_out, uint64_t seed, bool trainable) {
  Tensor t = Tensor::empty(shape);
  init.fill(t, fan_in, fan_out, Philox(seed, variables_.size()));
  if (device_) t = t.to(*device_);
  mark_trainable(t, trainable && trainable_);
  variables_.push_back(Variable{name_ + "/" + short_name, t, trainable && trainable_, !trainable_, trainable});
  return variables_.back().value;
}

void Layer::set_trainable(bool trainable) {
  trainable_ = trainable;
  for (Variable& v : variables_) {
    v.frozen = !trainable;
    v.trainable = v.learns && trainable;
    mark_trainable(v.value, v.trainable);
  }
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

}  // namespace layers
}  // namespace tandem
