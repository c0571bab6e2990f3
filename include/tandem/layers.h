#pragma once
// Keras-style layers. Each is built once for a per-sample input shape, then called on batches.
#include <array>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tandem/autograd.h"
#include "tandem/devices.h"
#include "tandem/initializers.h"
#include "tandem/ops.h"

namespace tandem {

// What a layer needs to know about the call beyond its input.
struct CallContext {
  bool training = false;
  RandomKey random;  // seed and step for dropout; the layer mixes in its own index
  // Where a step that runs several calls before one update collects what it applies once (a
  // pipeline stage's micro-batches, a replica's stacked parts); null: each call's own. Passed
  // with the call, not kept by the thread: Dense hands its kernel's gradient to the first,
  // BatchNormalization its moving statistics to the second.
  ops::DeferredKernelGradients* kernel_gradients = nullptr;
  ops::DeferredMovingStatistics* moving_statistics = nullptr;
  // Where the layers' activity regularizers put their penalties, one per row (B) each, for the
  // step to add to its rows' losses; null where nobody takes them (predict). A training call that
  // meets an activity regularizer with nowhere to put it fails, naming the layer.
  std::vector<Tensor>* penalties = nullptr;
};

// A height × width pair that also accepts one number for both (Keras' int-or-tuple).
struct Size2 {
  int64_t h, w;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose, as Keras takes 3 for (3, 3)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
};

namespace layers {

class SymbolicTensor;  // tandem/graph.h

// Deterministic replicated training (MirroredOptions::deterministic) cuts each global batch into
// a fixed list of parts (micro-batches) and runs each layer on all of a replica's parts before the
// next layer, so that a layer whose output depends on other rows (BatchNormalization) sees them
// together.
struct BatchParts {
  std::vector<Tensor>& h;                     // in: the parts' inputs; out: their outputs
  const std::vector<CallContext>& contexts;   // one per part
  std::function<void(size_t part)> use_part;  // makes the variables part's own (its own gradients)
  ops::GatherParts gather;                    // every part's values, from every replica
};

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  virtual ~Layer() = default;
  virtual std::string type() const = 0;          // "Dense"
  virtual std::string default_name() const = 0;  // "dense"
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // The layer's full name for messages: Dense "dense_1".
  std::string label() const;

  // Per-sample input shape declared by the user (first layer), if any.
  const std::optional<Shape>& declared_input_shape() const { return declared_input_shape_; }
  // Creates the variables for per-sample inputs of `input_shape`; returns the per-sample output shape.
  Shape build(const Shape& input_shape, uint64_t seed);
  bool built() const { return built_; }
  const Shape& output_shape() const { return output_shape_; }
  const Shape& input_shape() const { return input_shape_; }

  virtual Tensor call(const Tensor& x, const CallContext& ctx) = 0;
  // Keras' functional API (tandem/graph.h): the layer called on a keras.Input or another layer's
  // output; a merge layer on a list. A layer held by a std::shared_ptr is itself the graph's layer,
  // so calling it again shares it (and its variables); a layer held by value (Dense(8)(x)) puts a
  // copy of itself in the graph, once: a second call of that value is refused, naming it.
  SymbolicTensor operator()(const SymbolicTensor& x);
  SymbolicTensor operator()(std::initializer_list<SymbolicTensor> xs);
  SymbolicTensor operator()(std::span<const SymbolicTensor> xs);
  // This layer's call and then `next`'s, as one op, where the layer can fuse the two (Conv2D with
  // ReLU, then max pooling); nothing where it cannot. call_layers asks each layer of a model.
  virtual std::optional<Tensor> call_with_next(const Layer& next, const Tensor& x, const CallContext& ctx) {
    (void)next, (void)x, (void)ctx;
    return std::nullopt;
  }
  // Deterministic replicated training: the parts one by one, unless the layer needs them together.
  virtual void call_parts(BatchParts& parts);
  virtual bool needs_parts_together() const { return false; }
  // Whether each output row depends on its input row alone, with the same bits whatever rows come
  // with it (Dense's float32 products under ops::RowExactProducts): deterministic training may then
  // run a replica's parts through it as one batch.
  virtual bool stacks_rows() const { return false; }
  // After backward of a call_parts step (layers in reverse order).
  virtual void finish_parts() {}
  // Which of its variables the layer's call can hand to ops::DeferredKernelGradients as products
  // (CallContext::kernel_gradients: Dense's kernel, variable 0, and its bias, variable 1, summed
  // from the same products); -1: none. A step asks the layer, not its type.
  struct DeferrableKernel {
    int kernel = -1, bias = -1;
  };
  virtual DeferrableKernel deferrable_kernel() const { return {}; }
  // A layer with moving statistics (BatchNormalization): their variables and the momentum they
  // move by, for a step that moves them over several calls (ops::DeferredMovingStatistics); none
  // elsewhere. The pointers hold while the layer's variables do.
  struct MovingStatistics {
    Tensor* mean = nullptr;
    Tensor* variance = nullptr;
    float momentum = 0.0f;
  };
  virtual std::optional<MovingStatistics> moving_statistics() { return std::nullopt; }

  // A deep copy: same configuration, its own copies of the variables (a replica's layer).
  std::shared_ptr<Layer> replicate() const;
  // A shallow copy: same configuration, the same variables (a central-storage replica's layer).
  virtual std::shared_ptr<Layer> clone() const = 0;
  // For an elementwise layer: a copy that works on features [offset, offset + width) of samples
  // `features` wide, as a tensor-parallel layer's slice of activations, computing there what it
  // computes on whole samples (a dropout mask's part); null where the layer needs whole samples.
  virtual std::shared_ptr<Layer> on_feature_slice(int64_t offset, int64_t width, int64_t features) const {
    (void)offset, (void)width, (void)features;
    return nullptr;
  }

  std::vector<Variable>& variables() { return variables_; }
  const std::vector<Variable>& variables() const { return variables_; }
  // Keras' `trainable`: a frozen layer (false) keeps its variables in training (no gradients, no
  // updates, no optimizer slots; checkpoints keep them), and batch normalization then runs in
  // inference mode, as Keras'. Set before or after building; the next fit or apply follows it.
  bool trainable() const { return trainable_; }
  void set_trainable(bool trainable);
  int64_t count_params() const;

  // Keras' kernel_regularizer and bias_regularizer (the penalty of the variable of that name joins
  // fit's and evaluate's loss; a layer without that variable refuses it) and activity_regularizer
  // (the penalty of each output row joins that row's loss, so a batch's is their sum ÷ its rows, as
  // Keras divides it by the batch size). Set before or after building.
  struct Regularizers {
    Regularizer kernel, bias, activity;
  };
  void set_regularizers(const Regularizers& regularizers);
  const Regularizers& regularizers() const { return regularizers_; }

  // Keras' dtype policy: "float32", or "mixed_bfloat16" (the layer's matrix products in bf16 with
  // float32 accumulation; its variables, inputs and outputs float32: ops::PrecisionScope). A
  // layer takes the global policy (mixed_precision::set_global_policy) when it is made.
  std::string dtype_policy() const;
  void set_dtype_policy(const std::string& name);

  // Where the layer lives (devices.h): the placement scope's device when it was made, or the one
  // given here (its variables move there); none: the device of the model's input.
  const std::optional<Device>& device() const { return device_; }
  void place_on(Device device);

 protected:
  Layer(std::string name, std::optional<Shape> input_shape);
  virtual Shape do_build(const Shape& input_shape, uint64_t seed) = 0;
  Tensor& add_variable(const std::string& short_name, const Shape& shape, const Initializer& init, int64_t fan_in,
                       int64_t fan_out, uint64_t seed, bool trainable = true);
  // Checks that the layer has the variables `r` regularizes (named), then sets their regularizers.
  void apply_regularizers(const Regularizers& r);
  // Checks the per-sample part of a batch against the built input shape.
  void check_input(const Tensor& x) const;

  std::string name_;
  std::optional<Shape> declared_input_shape_;
  Shape input_shape_, output_shape_;
  bool built_ = false;
  std::vector<Variable> variables_;
  std::optional<Device> device_;
  bool trainable_ = true;
  Regularizers regularizers_;
  ops::Precision precision_;      // the dtype policy's products: a layer that multiplies runs its call under it
  bool called_as_value_ = false;  // operator() put a copy of this value in a graph
};

}  // namespace layers

// Keras' mixed_precision: the policy layers made from now on take. Names: "float32" (the default)
// and "mixed_bfloat16"; "mixed_float16" is refused (float16 products are a GPU's). On a CPU
// without bf16 instructions (AVX512_BF16 or AMX) "mixed_bfloat16" is kept, its products stay
// float32, and one line says so on stderr.
namespace mixed_precision {
void set_global_policy(const std::string& name);
std::string global_policy();
}  // namespace mixed_precision

namespace layers {

// Runs `layers` in order on x, each on its device (Layer::device; an unplaced one on x's), the
// activations moved between devices and the result moved back to x's device. Activity
// regularizers' penalties go to ctx.penalties (add_activity_penalty).
Tensor call_layers(std::span<const std::shared_ptr<Layer>> layers, const Tensor& x, const CallContext& ctx);
// After `layer` gave `output` in a call under ctx: its activity regularizer's row penalties to
// ctx.penalties, on `device` (where the rows' losses are).
void add_activity_penalty(const Layer& layer, const Tensor& output, const CallContext& ctx, Device device);

struct DenseOptions {
  bool use_bias = true;
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec bias_initializer = "zeros";
  std::string name;
  std::optional<Shape> input_shape;
  // Split over this many devices under ModelParallelStrategy (1: whole; the strategy's own
  // number, or that strategy splits every Dense it can by itself).
  int shards = 1;
};

class Dense : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Dense>(*this); }
  explicit Dense(int64_t units, const std::string& activation = "", DenseOptions options = {});
  std::string type() const override { return "Dense"; }
  std::string default_name() const override { return "dense"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool stacks_rows() const override;
  DeferrableKernel deferrable_kernel() const override { return {0, options_.use_bias ? 1 : -1}; }
  int64_t units() const { return units_; }
  Activation activation() const { return activation_; }
  const DenseOptions& options() const { return options_; }

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  int64_t units_;
  Activation activation_;
  DenseOptions options_;
  Initializer kernel_init_, bias_init_;
};

struct DropoutOptions {
  std::string name;
  std::optional<Shape> input_shape;
  // Keras' seed: the layer's masks from this seed alone (by step and row), not from the model's.
  std::optional<uint64_t> seed;
};

class Dropout : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Dropout>(*this); }
  explicit Dropout(float rate, DropoutOptions options = {});
  std::string type() const override { return "Dropout"; }
  std::string default_name() const override { return "dropout"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool stacks_rows() const override { return true; }
  float rate() const { return rate_; }
  std::shared_ptr<Layer> on_feature_slice(int64_t offset, int64_t width, int64_t features) const override;

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  float rate_;
  uint64_t salt_ = 0;
  std::optional<uint64_t> seed_;
  int64_t feature_offset_ = 0, features_ = 0;  // a slice's place in whole samples (0: whole)
};

struct Conv2DOptions {
  Size2 strides = 1;
  std::string padding = "valid";
  std::string activation;
  bool use_bias = true;
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec bias_initializer = "zeros";
  std::string name;
  std::optional<Shape> input_shape;
};

class Conv2D : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Conv2D>(*this); }
  Conv2D(int64_t filters, Size2 kernel_size, Conv2DOptions options = {});
  std::string type() const override { return "Conv2D"; }
  std::string default_name() const override { return "conv2d"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  std::optional<Tensor> call_with_next(const Layer& next, const Tensor& x, const CallContext& ctx) override;
  int64_t filters() const { return filters_; }
  Size2 kernel_size() const { return kernel_size_; }
  const Conv2DOptions& options() const { return options_; }

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  int64_t filters_;
  Size2 kernel_size_;
  Conv2DOptions options_;
  Padding padding_;
  Activation activation_;
  Initializer kernel_init_, bias_init_;
};

struct Pooling2DOptions {
  std::optional<Size2> strides;  // defaults to the pool size
  std::string padding = "valid";
  std::string name;
  std::optional<Shape> input_shape;
};

class Pooling2D : public Layer {
 public:
  std::string type() const override { return max_ ? "MaxPooling2D" : "AveragePooling2D"; }
  std::string default_name() const override { return max_ ? "max_pooling2d" : "average_pooling2d"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool is_max() const { return max_; }
  Size2 pool_size() const { return pool_size_; }
  Size2 strides() const { return strides_; }
  Padding padding() const { return padding_; }

 protected:
  Pooling2D(bool max, Size2 pool_size, Pooling2DOptions options);

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  bool max_;
  Size2 pool_size_, strides_;
  Padding padding_;
};

class MaxPooling2D : public Pooling2D {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<MaxPooling2D>(*this); }
  explicit MaxPooling2D(Size2 pool_size = 2, Pooling2DOptions options = {})
      : Pooling2D(true, pool_size, std::move(options)) {}
};

class AveragePooling2D : public Pooling2D {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<AveragePooling2D>(*this); }
  explicit AveragePooling2D(Size2 pool_size = 2, Pooling2DOptions options = {})
      : Pooling2D(false, pool_size, std::move(options)) {}
};

// Keras' GlobalAveragePooling2D: (B, H, W, C) -> each channel's mean, (B, C) (keepdims: (B, 1, 1, C)).
struct GlobalPooling2DOptions {
  bool keepdims = false;
  std::string name;
  std::optional<Shape> input_shape;
};

class GlobalAveragePooling2D : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<GlobalAveragePooling2D>(*this); }
  explicit GlobalAveragePooling2D(GlobalPooling2DOptions options = {})
      : Layer(options.name, options.input_shape), keepdims_(options.keepdims) {}
  std::string type() const override { return "GlobalAveragePooling2D"; }
  std::string default_name() const override { return "global_average_pooling2d"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool stacks_rows() const override { return true; }
  bool keepdims() const { return keepdims_; }

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  bool keepdims_;
};

// Keras' ZeroPadding2D: rows of zeros above and below each image, columns left and right.
struct ZeroPadding2DOptions {
  std::string name;
  std::optional<Shape> input_shape;
};

class ZeroPadding2D : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<ZeroPadding2D>(*this); }
  // (h, w): h rows above and below, w columns left and right.
  explicit ZeroPadding2D(Size2 padding = 1, ZeroPadding2DOptions options = {})
      : ZeroPadding2D({padding.h, padding.h, padding.w, padding.w}, std::move(options)) {}
  ZeroPadding2D(std::array<int64_t, 4> top_bottom_left_right, ZeroPadding2DOptions options = {});
  std::string type() const override { return "ZeroPadding2D"; }
  std::string default_name() const override { return "zero_padding2d"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool stacks_rows() const override { return true; }
  const std::array<int64_t, 4>& padding() const { return padding_; }  // top, bottom, left, right

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  std::array<int64_t, 4> padding_;
};

struct FlattenOptions {
  std::string name;
  std::optional<Shape> input_shape;
};

class Flatten : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Flatten>(*this); }
  explicit Flatten(FlattenOptions options = {}) : Layer(std::move(options.name), std::move(options.input_shape)) {}
  std::string type() const override { return "Flatten"; }
  std::string default_name() const override { return "flatten"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool stacks_rows() const override { return true; }

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
};

struct BatchNormalizationOptions {
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  // Under a multi-replica strategy: normalize with the global batch's statistics (as one device
  // would) instead of each replica's own (Keras' synchronized=True). In deterministic mode the
  // statistics are the global batch's (synchronized) or each micro-batch's (ghost batches).
  bool synchronized = false;
  std::string name;
  std::optional<Shape> input_shape;
};

class BatchNormalization : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<BatchNormalization>(*this); }
  explicit BatchNormalization(BatchNormalizationOptions options = {});
  std::string type() const override { return "BatchNormalization"; }
  std::string default_name() const override { return "batch_normalization"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  void call_parts(BatchParts& parts) override;
  bool needs_parts_together() const override { return trainable(); }
  std::optional<MovingStatistics> moving_statistics() override {
    return MovingStatistics{&variables_[2].value, &variables_[3].value, options_.momentum};
  }
  void finish_parts() override;
  const BatchNormalizationOptions& options() const { return options_; }

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  BatchNormalizationOptions options_;
  std::shared_ptr<ops::BatchNormPartsBackward> pending_;  // of the current call_parts step
};

struct ActivationOptions {
  std::string name;
  std::optional<Shape> input_shape;
};

class Activation : public Layer {
 public:
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Activation>(*this); }
  explicit Activation(const std::string& activation, ActivationOptions options = {});
  std::string type() const override { return "Activation"; }
  std::string default_name() const override { return "activation"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool stacks_rows() const override { return true; }
  tandem::Activation activation() const { return activation_; }
  std::shared_ptr<Layer> on_feature_slice(int64_t offset, int64_t width, int64_t features) const override;

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override { return input_shape; }
  tandem::Activation activation_;
};

// Keras' ReLU layer, with its defaults (no max_value, negative_slope 0, threshold 0).
class ReLU : public Activation {
 public:
  explicit ReLU(ActivationOptions options = {}) : Activation("relu", std::move(options)) {}
  std::shared_ptr<Layer> clone() const override { return std::make_shared<ReLU>(*this); }
  std::string type() const override { return "ReLU"; }
  std::string default_name() const override { return "re_lu"; }
};

// One shard of a Dense layer split over the ranks of a group (tensor parallelism, paired as
// Megatron-LM pairs them), made from the whole layer, built:
//   Column: columns [first, first + width) of the kernel and bias; the input whole (its gradient
//   summed over the group), the output this shard's slice of the units, or every shard's side by
//   side (gather: then the activation runs on whole rows, softmax included).
//   Row: rows [first, first + width) of the kernel, the input this shard's slice of the features;
//   the partial products (shard 0's with the bias, which only it holds) summed over the group,
//   then the activation.
// widths[r] is shard r's share of the units (Column) or of the input features (Row).
class TensorParallelDense : public Layer {
 public:
  enum class Split { Column, Row };
  TensorParallelDense(const Dense& whole, Split split, std::vector<int64_t> widths, distribute::Communicator& group,
                      bool gather);
  std::shared_ptr<Layer> clone() const override { return std::make_shared<TensorParallelDense>(*this); }
  std::string type() const override { return "Dense"; }
  std::string default_name() const override { return "dense"; }
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  Split split() const { return split_; }
  const std::vector<int64_t>& widths() const { return widths_; }
  int64_t first() const { return first_; }
  int64_t width() const { return widths_[static_cast<size_t>(group_->rank())]; }
  // Whether this shard holds a piece of the whole layer's variable i (its variables are those it
  // holds, in the whole layer's order); variable i's piece cut from the whole layer's tensor (a
  // variable, or an optimizer slot of its shape); this shard's piece written into the whole one.
  bool holds(size_t variable) const;
  Tensor cut(size_t variable, const Tensor& whole) const;
  void put(size_t variable, const Tensor& piece, Tensor& whole) const;

 private:
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  Split split_;
  std::vector<int64_t> widths_;
  int64_t first_ = 0;
  distribute::Communicator* group_;
  bool gather_;
  tandem::Activation activation_;
  bool use_bias_;
};

}  // namespace layers
}  // namespace tandem
