#include "tandem/losses.h"

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

std::string Loss::name() const {
  switch (kind_) {
    case Kind::SparseCategoricalCrossentropy: return "sparse_categorical_crossentropy";
    case Kind::CategoricalCrossentropy: return "categorical_crossentropy";
    case Kind::BinaryCrossentropy: return "binary_crossentropy";
    case Kind::MeanSquaredError: return "mean_squared_error";
  }
  return "?";
}

void Loss::check_targets(const Tensor& y_true, const Shape& out) const {
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
