// sparse_softmax_cross_entropy: logits:(B,C), labels:(B) int32 -> loss:(B) = logsumexp(row) - row[label].
// softmax_cross_entropy: logits:(B,C), targets:(B,C) -> loss:(B) = Σ_j t_j·(logsumexp(row) - row_j).
// backward: dlogits = dy_i · (softmax(row) · Σt - t), the probabilities kept from the forward pass.
#include <cmath>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct CrossEntropyNode : autograd::Node {
  Tensor probabilities, labels, targets;  // labels for the sparse form, targets for the dense one
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t rows = probabilities.dim(0), cols = probabilities.dim(1);
    Tensor dx = Tensor::empty(probabilities.shape(), DType::Float32, dy.device());
    kernels::backend(dy.device())
        .cross_entropy_backward(probabilities.buffer<float>(), labels.defined() ? labels.buffer<int32_t>() : nullptr,
                                targets.defined() ? targets.buffer<float>() : nullptr, dy.buffer<float>(),
                                dx.buffer<float>(), rows, cols);
    tape.accumulate(input_slots[0], dx);
  }
};

void check_logits(const Tensor& logits, const char* op) {
  require_float(logits, op, "logits");
  require_rank(logits, 2, op, "logits");
  if (logits.dim(1) < 1) fail("{}: logits have no classes (shape {})", op, logits.shape().str());
}

Tensor finish(const Tensor& logits_in, Tensor loss, Tensor probabilities, Tensor labels, Tensor targets) {
  if (auto* tape = autograd::tracking_tape({&logits_in})) {
    auto* node = new CrossEntropyNode();
    node->probabilities = std::move(probabilities);
    node->labels = std::move(labels);
    node->targets = std::move(targets);
    autograd::record(tape, node, {&logits_in}, loss);
  }
  return loss;
}

}  // namespace

Tensor class_labels(const Tensor& labels, std::string_view what) {
  if (labels.dtype() == DType::Int32) return labels.contiguous();
  if (labels.dtype() != DType::Float32) return labels.astype(DType::Int32);  // bytes are whole and in range
  Tensor host = labels.to(Device::cpu()).contiguous();
  const float* v = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i)
    if (!std::isfinite(v[i]) || v[i] != std::trunc(v[i]) || v[i] < -2147483648.0f || v[i] >= 2147483648.0f)
      fail("{}: label {} at row {} is not a class index (labels must be whole numbers{})", what, v[i], i,
           std::isfinite(v[i]) && v[i] == std::trunc(v[i]) ? " within int32's range" : "");
  return host.astype(DType::Int32).to(labels.device());
}

Tensor sparse_softmax_cross_entropy(const Tensor& logits_in, const Tensor& labels_in) {
  const char* op = "sparse_categorical_crossentropy";
  check_logits(logits_in, op);
  if (!labels_in.defined()) fail("{}: labels are undefined", op);
  int64_t rows = logits_in.dim(0), cols = logits_in.dim(1);
  if (labels_in.numel() != rows || (labels_in.rank() > 1 && labels_in.dim(-1) != 1))
    fail("{}: labels have shape {}, expected ({},) to match logits {}", op, labels_in.shape().str(), rows,
         logits_in.shape().str());
  Tensor labels = class_labels(labels_in, op);
  Tensor host_labels = labels.to(Device::cpu());  // checked on the host
  const int32_t* l = host_labels.data<int32_t>();
  for (int64_t i = 0; i < rows; ++i)
    if (l[i] < 0 || l[i] >= cols) fail("{}: label {} at index {} is out of range [0, {})", op, l[i], i, cols);
  labels = labels.to(logits_in.device());
  Tensor logits = logits_in.contiguous();
  Tensor loss = Tensor::empty({rows}, DType::Float32, logits.device());
  Tensor probabilities = Tensor::empty(logits.shape(), DType::Float32, logits.device());
  kernels::backend(logits.device())
      .sparse_softmax_cross_entropy(logits.buffer<float>(), labels.buffer<int32_t>(), rows, cols, loss.buffer<float>(),
                                    probabilities.buffer<float>());
  return finish(logits_in, loss, probabilities, labels, Tensor());
}

Tensor softmax_cross_entropy(const Tensor& logits_in, const Tensor& targets_in) {
  const char* op = "categorical_crossentropy";
  check_logits(logits_in, op);
  require_float(targets_in, op, "targets");
  require_device(targets_in, logits_in, op, "targets");
  require_same_shape(logits_in, targets_in, op);
  Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  int64_t rows = logits.dim(0), cols = logits.dim(1);
  Tensor loss = Tensor::empty({rows}, DType::Float32, logits.device());
  Tensor probabilities = Tensor::empty(logits.shape(), DType::Float32, logits.device());
  kernels::backend(logits.device())
      .softmax_cross_entropy(logits.buffer<float>(), targets.buffer<float>(), rows, cols, loss.buffer<float>(),
                             probabilities.buffer<float>());
  return finish(logits_in, loss, probabilities, Tensor(), targets);
}

}  // namespace tandem::ops
