#pragma once
// Loss functions by Keras name; each gives one loss per sample, which training averages.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem {

struct LossOutput;

class Loss {
 public:
  enum class Kind { SparseCategoricalCrossentropy, CategoricalCrossentropy, BinaryCrossentropy, MeanSquaredError };
  Loss(const char* name) : Loss(std::string(name)) {}  // NOLINT: "mse" converts, as in Keras
  Loss(const std::string& name);                       // NOLINT
  // label_smoothing (Keras'): the targets of a categorical cross-entropy become
  // y·(1 - s) + s / classes, of a binary one y·(1 - s) + s / 2; in [0, 1]; the other losses have none.
  Loss(Kind kind, bool from_logits = false, float label_smoothing = 0.0f);

  static Loss sparse_categorical_crossentropy(bool from_logits = false) {
    return {Kind::SparseCategoricalCrossentropy, from_logits};
  }
  static Loss categorical_crossentropy(bool from_logits = false, float label_smoothing = 0.0f) {
    return {Kind::CategoricalCrossentropy, from_logits, label_smoothing};
  }
  static Loss binary_crossentropy(bool from_logits = false, float label_smoothing = 0.0f) {
    return {Kind::BinaryCrossentropy, from_logits, label_smoothing};
  }
  static Loss mean_squared_error() { return {Kind::MeanSquaredError}; }

  // y_true: labels (B) for the sparse form, else like y_pred. Returns (B).
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const;
  // Checks y_true against y_pred's shape before training starts, naming both.
  void check_targets(const Tensor& y_true, const Shape& per_sample_output) const;

  // A model of several outputs (a Functional's, their predictions packed side by side as
  // pack_inputs packs inputs; the targets packed likewise, float32, a sparse target one column of
  // labels): losses[i] on output i, weighted by weights[i] (Keras' loss list and loss_weights;
  // empty: 1 each) and summed per sample. compile binds it to the model's outputs (bound).
  static Loss outputs(std::vector<Loss> losses, std::vector<float> weights = {});
  // For a model of these outputs (shapes per sample, names): this loss list bound to them, or one
  // loss given for all of them (each weight 1), as Keras applies one loss to every output.
  Loss bound(std::span<const Shape> output_shapes, std::span<const std::string> names) const;
  // A loss list's outputs (null: one output).
  const std::vector<LossOutput>* parts() const { return parts_.get(); }
  // Output i's predictions and targets from the packed ones, each in the output's own shape
  // (sparse labels int32).
  Tensor output_predictions(const Tensor& packed, size_t i) const;
  Tensor output_targets(const Tensor& packed, size_t i) const;
  Kind kind() const { return kind_; }
  bool from_logits() const { return from_logits_; }
  float label_smoothing() const { return label_smoothing_; }
  std::string name() const;

 private:
  Kind kind_;
  bool from_logits_;
  float label_smoothing_ = 0.0f;
  std::shared_ptr<const std::vector<LossOutput>> parts_;
};

// One output of a loss list: its loss and weight, then where compile bound it (the output's name
// and shape, its columns in the packed predictions and targets).
struct LossOutput {
  LossOutput(Loss l, float w) : loss(std::move(l)), weight(w) {}
  Loss loss;
  float weight = 1.0f;
  std::string name;
  Shape shape;
  int64_t prediction_column = 0, target_column = 0;
  int64_t target_width() const { return loss.kind() == Loss::Kind::SparseCategoricalCrossentropy ? 1 : shape.numel(); }
};

// The per-sample losses summed and divided by the global batch (tf.nn.compute_average_loss):
// inside Strategy::run, where each replica has a slice of the batch, the replicas' gradients
// then sum to the gradient of the mean over the global batch. global_batch_size 0: the rows of
// every replica, summed (one small all-reduce; a replica with no rows gets a zero loss).
Tensor compute_average_loss(const Tensor& per_sample_loss, int64_t global_batch_size = 0);

}  // namespace tandem
