// Activations, fused with the bias add of a dense layer, and their derivatives: loops over
// kernels/elements.h's formulas, one loop per activation so that each vectorizes.
#include <algorithm>

#include "kernels/cpu/kernels.h"
#include "kernels/elements.h"

namespace tandem::kernels::cpu {
namespace {
namespace el = elements;

TANDEM_VECTORIZE void relu_rows_loop(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* r = y + i * cols;
    if (b)
      for (int64_t j = 0; j < cols; ++j) r[j] = el::activation(el::kReLU, r[j] + b[j]);
    else
      for (int64_t j = 0; j < cols; ++j) r[j] = el::activation(el::kReLU, r[j]);
  }
}
void relu_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  core::vectorized([&] { relu_rows_loop(y, b, rows, cols); });
}

TANDEM_VECTORIZE void bias_rows_loop(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* r = y + i * cols;
    for (int64_t j = 0; j < cols; ++j) r[j] += b[j];
  }
}
void bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  core::vectorized([&] { bias_rows_loop(y, b, rows, cols); });
}

// One elementwise activation over y (exp of min(x, 0) for every element: no branch).
template <el::Act A>
TANDEM_VECTORIZE void activation_all_loop(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = el::activation(A, y[i]);
}
template <el::Act A>
void activation_all(float* y, int64_t n) {
  core::vectorized([&] { activation_all_loop<A>(y, n); });
}

template <el::Act A>
TANDEM_VECTORIZE void backward_from_output_loop(const float* dy, const float* y, float* dz, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dz[i] = el::activation_backward(A, dy[i], 0.0f, y[i]);
}
template <el::Act A>
void backward_from_output(const float* dy, const float* y, float* dz, int64_t n) {
  core::vectorized([&] { backward_from_output_loop<A>(dy, y, dz, n); });
}

}  // namespace

void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) {
  if (act == Activation::ReLU) return relu_rows(y, bias, rows, cols);
  if (bias) bias_rows(y, bias, rows, cols);
  int64_t n = rows * cols;
  switch (act) {
    case Activation::Linear: break;
    case Activation::ReLU: break;
    case Activation::ELU: activation_all<el::kELU>(y, n); break;
    case Activation::SELU: activation_all<el::kSELU>(y, n); break;
    case Activation::Sigmoid: activation_all<el::kSigmoid>(y, n); break;
    case Activation::Tanh: activation_all<el::kTanh>(y, n); break;
    case Activation::GELU:
      for (int64_t i = 0; i < n; ++i) y[i] = el::activation(el::kGELU, y[i]);
      break;
    case Activation::Softmax:
      for (int64_t i = 0; i < rows; ++i) softmax_row(y + i * cols, cols, y + i * cols);
      break;
  }
}

void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols,
                         Activation act) {
  int64_t n = rows * cols;
  if (act == Activation::GELU) {
    for (int64_t i = 0; i < n; ++i) dz[i] = el::activation_backward(el::kGELU, dy[i], z[i], 0.0f);
    return;
  }
  if (act == Activation::Softmax) {
    for (int64_t i = 0; i < rows; ++i) {
      const float* yr = y + i * cols;
      const float* dyr = dy + i * cols;
      float dot = 0.0f;
      for (int64_t j = 0; j < cols; ++j) dot += dyr[j] * yr[j];
      for (int64_t j = 0; j < cols; ++j) dz[i * cols + j] = yr[j] * (dyr[j] - dot);
    }
    return;
  }
  switch (act) {
    case Activation::ReLU: return backward_from_output<el::kReLU>(dy, y, dz, n);
    case Activation::ELU: return backward_from_output<el::kELU>(dy, y, dz, n);
    case Activation::SELU: return backward_from_output<el::kSELU>(dy, y, dz, n);
    case Activation::Sigmoid: return backward_from_output<el::kSigmoid>(dy, y, dz, n);
    case Activation::Tanh: return backward_from_output<el::kTanh>(dy, y, dz, n);
    default: return backward_from_output<el::kLinear>(dy, y, dz, n);
  }
}

TANDEM_VECTORIZE void column_sums_loop(const float* dy, int64_t rows, int64_t cols, float* db) {
  for (int64_t j = 0; j < cols; ++j) db[j] = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const float* r = dy + i * cols;
    for (int64_t j = 0; j < cols; ++j) db[j] += r[j];
  }
}
void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) {
  core::vectorized([&] { column_sums_loop(dy, rows, cols, db); });
}

}  // namespace tandem::kernels::cpu
