// TensorParallelDense (layers.h): one shard of a Dense layer split over a group's ranks. A column
// shard and the row shard after it cost one sum over the group forward (the row shard's partial
// products) and one backward (the column shard's input gradient, where its input needs one).
#include <numeric>

#include "tandem/layers.h"

namespace tandem::layers {
TensorParallelDense::TensorParallelDense(const Dense& whole, Split split, std::vector<int64_t> widths,
                                         distribute::Communicator& group, bool gather)
    : Layer(whole.name(), std::nullopt),
      split_(split),
      widths_(std::move(widths)),
      group_(&group),
      gather_(gather && split == Split::Column),
      activation_(whole.activation()),
      use_bias_(whole.options().use_bias) {
  if (!whole.built()) fail("{}: a Dense layer is split once built", whole.label());
  if (whole.regularizers().activity.any())
    fail(
        "{}: activity_regularizer is not supported on a Dense layer split over devices (each holds part of its "
        "output); split other layers, or regularize the weights (kernel_regularizer)",
        whole.label());
  set_dtype_policy(whole.dtype_policy());
  int rank = group.rank();
  if (static_cast<int>(widths_.size()) != group.size())
    fail("{}: {} widths for a group of {} shards", whole.label(), widths_.size(), group.size());
  int64_t total = std::accumulate(widths_.begin(), widths_.end(), int64_t{0});
  int64_t in = whole.input_shape()[0], units = whole.units();
  int64_t split_size = split == Split::Column ? units : in;
  if (total != split_size)
    fail("{}: widths add up to {}, the layer's {} are {}", whole.label(), total,
         split == Split::Column ? "units" : "input features", split_size);
  if (split == Split::Column && !gather_ && activation_ == tandem::Activation::Softmax)
    fail("{}: softmax needs whole rows: a column shard of it must gather its output", whole.label());
  first_ = std::accumulate(widths_.begin(), widths_.begin() + rank, int64_t{0});
  int64_t mine = widths_[static_cast<size_t>(rank)];
  input_shape_ = Shape{split == Split::Column ? in : mine};
  output_shape_ = Shape{split == Split::Column && !gather_ ? mine : units};
  built_ = true;
  trainable_ = whole.trainable();
  for (size_t i = 0; i < whole.variables().size(); ++i) {
    if (!holds(i)) continue;
    const Variable& v = whole.variables()[i];
    Tensor piece = cut(i, v.value);
    mark_trainable(piece, v.trainable);
    variables_.push_back(Variable{v.name, piece, v.trainable, v.frozen, v.learns, v.regularizer});
  }
}

Shape TensorParallelDense::do_build(const Shape&, uint64_t) {
  fail("{}: a tensor-parallel shard is made built", label());
}

bool TensorParallelDense::holds(size_t variable) const {
  return split_ == Split::Column || variable == 0 || group_->rank() == 0;  // a row split's bias: shard 0's
}

Tensor TensorParallelDense::cut(size_t variable, const Tensor& whole) const {
  bool kernel = variable == 0;
  if (split_ == Split::Column) return whole.columns(first_, first_ + width()).clone();
  if (kernel) return whole.contiguous().slice(first_, first_ + width()).clone();  // rows
  return whole.clone();  // a row split's bias, whole on shard 0
}

void TensorParallelDense::put(size_t variable, const Tensor& piece, Tensor& whole) const {
  bool kernel = variable == 0;
  if (split_ == Split::Column) {
    Tensor mine = whole.columns(first_, first_ + width());
    mine.copy_from(piece);
  } else if (kernel) {
    Tensor rows = whole.slice(first_, first_ + width());
    rows.copy_from(piece);
  } else {
    whole.copy_from(piece);
  }
}

Tensor TensorParallelDense::call(const Tensor& x, const CallContext&) {
  check_input(x);
  ops::PrecisionScope precision(precision_);
  const Tensor& kernel = variables_[0].value;
  if (split_ == Split::Column) {
    Tensor bias = use_bias_ ? variables_[1].value : Tensor();
    Tensor in = ops::copy_to_group(x, *group_);  // the input's gradient is summed over the shards
    if (!gather_) return ops::dense(in, kernel, bias, activation_);
    Tensor mine = ops::dense(in, kernel, bias, tandem::Activation::Linear);
    return ops::activation(ops::gather_from_group(mine, *group_, widths_), activation_);
  }
  // Shard 0 adds the bias to its partial products (in the same pass); the sum has it once.
  Tensor partial = use_bias_ && group_->rank() == 0
                       ? ops::dense(x, kernel, variables_[1].value, tandem::Activation::Linear)
                       : ops::matmul(x, kernel);
  Tensor summed = ops::reduce_from_group(partial, *group_);
  return activation_ == tandem::Activation::Linear ? summed : ops::activation(summed, activation_);
}

}  // namespace tandem::layers
