#include "tandem/losses.h"

#include <fmt/ranges.h>
#include <cmath>

#include "tandem/autograd.h"
#include "tandem/collectives/replica_context.h"
#include "tandem/ops.h"

namespace tandem {
namespace {
constexpr float kEpsilon = 1e-7f;  // Keras' backend epsilon for clipping probabilities
}

Loss::Loss(Kind kind, bool from_logits, float label_smoothing)
    : kind_(kind), from_logits_(from_logits), label_smoothing_(label_smoothing) {
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
    fail("{}: label_smoothing must be in [0, 1], got {}", name(), label_smoothing);
  if (label_smoothing > 0.0f && kind != Kind::CategoricalCrossentropy && kind != Kind::BinaryCrossentropy)
    fail(
        "{}: label_smoothing applies to categorical_crossentropy and binary_crossentropy (Keras' rule; one-hot "
        "labels and categorical_crossentropy smooth what sparse labels cannot), got {}",
        name(), label_smoothing);
}

Loss::Loss(const std::string& name) : from_logits_(false) {
  if (name == "sparse_categorical_crossentropy") kind_ = Kind::SparseCategoricalCrossentropy;
  else if (name == "categorical_crossentropy") kind_ = Kind::CategoricalCrossentropy;
  else if (name == "binary_crossentropy") kind_ = Kind::BinaryCrossentropy;
  else if (name == "mse" || name == "mean_squared_error") kind_ = Kind::MeanSquaredError;
  else
    fail(
        "loss: unknown loss \"{}\"; expected one of: sparse_categorical_crossentropy, categorical_crossentropy, "
        "binary_crossentropy, mse",
        name);
}

Loss Loss::outputs(std::vector<Loss> losses, std::vector<float> weights) {
  if (losses.empty()) fail("loss: a loss list needs a loss per output, got none");
  if (!weights.empty() && weights.size() != losses.size())
    fail("loss_weights: {} weights for {} losses; give one per output", weights.size(), losses.size());
  auto parts = std::make_shared<std::vector<LossOutput>>();
  for (size_t i = 0; i < losses.size(); ++i) {
    if (losses[i].parts_) fail("loss: output {}'s loss is itself a loss list", i);
    float w = weights.empty() ? 1.0f : weights[i];
    if (!std::isfinite(w) || w < 0.0f) fail("loss_weights: weight {} is {}, expected a finite number >= 0", i, w);
    parts->emplace_back(losses[i], w);
  }
  Loss out(Kind::MeanSquaredError);  // the packed targets are float32 as a mean squared error's
  out.parts_ = std::move(parts);
  return out;
}

Loss Loss::bound(std::span<const Shape> shapes, std::span<const std::string> names) const {
  std::vector<LossOutput> parts;
  if (parts_) {
    if (parts_->size() != shapes.size())
      fail("loss: {} losses for a model of {} outputs ({}); give one per output, or one for all", parts_->size(),
           shapes.size(), fmt::join(names, ", "));
    parts = *parts_;
  } else {
    parts.assign(shapes.size(), LossOutput(*this, 1.0f));
  }
  int64_t prediction = 0, target = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].name = names[i];
    parts[i].shape = shapes[i];
    parts[i].prediction_column = prediction;
    parts[i].target_column = target;
    prediction += shapes[i].numel();
    target += parts[i].target_width();
  }
  Loss out(Kind::MeanSquaredError);
  out.parts_ = std::make_shared<const std::vector<LossOutput>>(std::move(parts));
  return out;
}

namespace {
Shape with_rows(int64_t rows, const Shape& per_sample) {
  Shape s{rows};
  for (int64_t d : per_sample) s.push_back(d);
  return s;
}
}  // namespace

Tensor Loss::output_predictions(const Tensor& packed, size_t i) const {
  const LossOutput& o = parts_->at(i);
  Tensor part = ops::part_columns(packed, o.prediction_column, o.prediction_column + o.shape.numel());
  return part.rank() == 2 && o.shape.rank() == 1 ? part : ops::reshape(part, with_rows(packed.dim(0), o.shape));
}

Tensor Loss::output_targets(const Tensor& packed, size_t i) const {
  const LossOutput& o = parts_->at(i);
  StopRecording constant;
  Tensor t = ops::columns(packed, o.target_column, o.target_column + o.target_width());
  if (o.loss.kind() != Kind::SparseCategoricalCrossentropy) return ops::reshape(t, with_rows(packed.dim(0), o.shape));
  std::vector<float> values = t.to(Device::cpu()).to_vector();
  std::vector<int32_t> labels(values.size());
  for (size_t r = 0; r < values.size(); ++r) labels[r] = static_cast<int32_t>(values[r]);
  return Tensor::from_vector({packed.dim(0)}, std::span<const int32_t>(labels)).to(packed.device());
}

std::string Loss::name() const {
  if (parts_) {
    std::string out;
    for (const LossOutput& o : *parts_) out += (out.empty() ? "" : ", ") + o.loss.name();
    return "[" + out + "]";
  }
  switch (kind_) {
    case Kind::SparseCategoricalCrossentropy: return "sparse_categorical_crossentropy";
    case Kind::CategoricalCrossentropy: return "categorical_crossentropy";
    case Kind::BinaryCrossentropy: return "binary_crossentropy";
    case Kind::MeanSquaredError: return "mean_squared_error";
  }
  return "?";
}

void Loss::check_targets(const Tensor& y_true, const Shape& out) const {
  if (parts_) {
    int64_t width = 0;
    std::string each;
    for (const LossOutput& o : *parts_) {
      width += o.target_width();
      each += fmt::format("{}{}: {}", each.empty() ? "" : ", ", o.name,
                          o.target_width() == 1 && o.loss.kind() == Kind::SparseCategoricalCrossentropy
                              ? std::string("1 column of labels")
                              : fmt::format("{} columns", o.target_width()));
    }
    if (y_true.rank() != 2 || y_true.dim(1) != width)
      fail("{}: the targets of {} outputs go packed as (rows, {}) ({}), got {}", name(), parts_->size(), width, each,
           y_true.shape().str());
    return;
  }
  if (kind_ == Kind::SparseCategoricalCrossentropy) {
    if (out.rank() != 1) fail("{}: model output per sample has shape {}, expected (classes,)", name(), out.str());
    if (!(y_true.rank() == 1 || (y_true.rank() == 2 && y_true.dim(1) == 1)))
      fail("{}: labels must have shape (samples,), got {}", name(), y_true.shape().str());
    return;
  }
  bool ok = y_true.rank() == out.rank() + 1;
  for (int i = 0; ok && i < out.rank(); ++i) ok = y_true.dim(i + 1) == out[i];
  if (!ok)
    fail("{}: targets have shape {}, expected {} to match the model output", name(), y_true.shape().str(),
         out.str_with_batch());
}

Tensor Loss::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  if (parts_) {  // each output's on its columns, weighted, summed
    Tensor sum;
    for (size_t i = 0; i < parts_->size(); ++i) {
      const LossOutput& o = (*parts_)[i];
      Tensor l = o.loss.per_sample(output_targets(y_true, i), output_predictions(y_pred, i));
      if (o.weight != 1.0f) l = ops::scale(l, o.weight);
      sum = sum.defined() ? ops::add(sum, l) : l;
    }
    return sum;
  }
  // A probability output that came from softmax is scored through its logits: same value,
  // stable gradient (what Keras does for a softmax output layer). So is one given to a loss
  // told from_logits: a second softmax over probabilities is never what was meant (Keras warns
  // and applies it; the loss then barely falls).
  Tensor logits = ops::softmax_logits(y_pred);
  Tensor targets = y_true;
  if (label_smoothing_ > 0.0f) {  // y·(1 - s) + s / classes (binary: s / 2), as Keras
    int64_t last = y_true.rank() > 0 ? y_true.dim(-1) : 1;
    float spread =
        kind_ == Kind::CategoricalCrossentropy ? label_smoothing_ / static_cast<float>(last) : 0.5f * label_smoothing_;
    StopRecording constant;
    targets = ops::add(ops::scale(y_true, 1.0f - label_smoothing_), Tensor::full({last}, spread, y_true.device()));
  }
  switch (kind_) {
    case Kind::SparseCategoricalCrossentropy:
      if (logits.defined()) return ops::sparse_softmax_cross_entropy(logits, y_true);
      if (from_logits_) return ops::sparse_softmax_cross_entropy(y_pred, y_true);
      // softmax(log p) = p / Σp: Keras' renormalization of probabilities, then -log p[label].
      return ops::sparse_softmax_cross_entropy(ops::log(ops::clip(y_pred, kEpsilon, 1.0f - kEpsilon)), y_true);
    case Kind::CategoricalCrossentropy:
      if (logits.defined()) return ops::softmax_cross_entropy(logits, targets);
      if (from_logits_) return ops::softmax_cross_entropy(y_pred, targets);
      return ops::softmax_cross_entropy(ops::log(ops::clip(y_pred, kEpsilon, 1.0f - kEpsilon)), targets);
    case Kind::BinaryCrossentropy: return ops::binary_cross_entropy(y_pred, targets, from_logits_);
    case Kind::MeanSquaredError: return ops::mean_squared_error(y_pred, y_true);
  }
  return Tensor();
}

Tensor compute_average_loss(const Tensor& per_sample_loss, int64_t global_batch_size) {
  if (per_sample_loss.rank() != 1)
    fail("compute_average_loss: per-sample losses must have shape (batch,), got {}", per_sample_loss.shape().str());
  if (global_batch_size < 0)
    fail("compute_average_loss: global_batch_size must be positive, got {}", global_batch_size);
  if (global_batch_size == 0) {
    // The rows of every replica, summed: right also when the global batch does not split evenly
    // (a replica may have none and contributes zeros). Every replica of the step calls this.
    global_batch_size = per_sample_loss.dim(0);
    const distribute::ReplicaContext* replica = distribute::replica_context();
    if (replica != nullptr && replica->batch_group != nullptr && replica->batch_group->size() > 1) {
      double rows = static_cast<double>(global_batch_size);
      replica->batch_group->all_reduce(std::span<double>(&rows, 1));
      global_batch_size = static_cast<int64_t>(rows);
    }
  }
  return ops::scale(ops::sum(per_sample_loss), 1.0f / static_cast<float>(global_batch_size));
}

}  // namespace tandem
