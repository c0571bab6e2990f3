// Keras' sample weights as fit and evaluate take them (model.h: FitOptions::sample_weight,
// class_weight): one float32 weight per row, checked and named in errors.
#include <algorithm>
#include <cmath>

#include "tandem/model.h"

namespace tandem {

Tensor Model::sample_weights(const Tensor& given, const std::map<int64_t, float>& class_weight, const Tensor& y,
                             const std::string& what) const {
  if (!given.defined() && class_weight.empty()) return {};
  if (!class_weight.empty() && loss_ && loss_->parts() != nullptr)
    fail("{}: class_weight weighs one output's classes; this model has {} outputs (give sample_weight)", what,
         loss_->parts()->size());
  int64_t n = y.dim(0);
  std::vector<float> w(static_cast<size_t>(n), 1.0f);
  if (given.defined()) {
    bool column = given.rank() == 2 && given.dim(1) == 1;
    if (!(given.rank() == 1 || column) || given.dim(0) != n)
      fail("{}: sample_weight has shape {}, expected one weight per sample: ({}) or ({}, 1)", what, given.shape().str(),
           n, n);
    if (given.dtype() != DType::Float32 && given.dtype() != DType::Int32)
      fail("{}: sample_weight must be numbers (float or int), got {}", what, dtype_name(given.dtype()));
    Tensor f = given.dtype() == DType::Float32 ? given.contiguous() : given.contiguous().astype(DType::Float32);
    const float* v = f.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(v[i])) fail("{}: sample_weight at row {} is {}, not a finite number", what, i, v[i]);
      w[static_cast<size_t>(i)] = v[i];
    }
  }
  if (!class_weight.empty()) {
    for (const auto& [c, cw] : class_weight)
      if (!std::isfinite(cw)) fail("{}: class_weight for class {} is {}, not a finite number", what, c, cw);
    // Each row's class, as Keras 3 reads it: a one-hot row's largest entry; else the value rounded.
    Tensor labels = y.contiguous();
    bool one_hot = labels.rank() == 2 && labels.dim(1) > 1;
    if (labels.rank() > 2) fail("{}: class_weight needs targets of rank 1 or 2, got {}", what, labels.shape().str());
    Tensor f = labels.dtype() == DType::Float32 ? labels : labels.astype(DType::Float32);
    const float* v = f.data<float>();
    int64_t width = one_hot ? labels.dim(1) : 1;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = v + i * width;
      int64_t c = one_hot ? std::max_element(row, row + width) - row : std::lround(row[0]);
      auto it = class_weight.find(c);
      if (it == class_weight.end())
        fail("{}: class_weight has no weight for class {} (row {}); give one for every class", what, c, i);
      w[static_cast<size_t>(i)] *= it->second;
    }
  }
  return Tensor::from_vector({n}, std::span<const float>(w));
}

}  // namespace tandem
