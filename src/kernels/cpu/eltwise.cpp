// Activations, fused with the bias add of a dense layer, and their derivatives.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {

constexpr float kSeluScale = 1.0507009873554804934f;
constexpr float kSeluAlpha = 1.6732632423543772848f;

TANDEM_VECTORIZE void relu_rows_loop(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* r = y + i * cols;
    if (b)
      for (int64_t j = 0; j < cols; ++j) r[j] = std::max(r[j] + b[j], 0.0f);
    else
      for (int64_t j = 0; j < cols; ++j) r[j] = std::max(r[j], 0.0f);
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

TANDEM_VECTORIZE void elu_all_loop(float* y, int64_t n, float scale, float alpha) {
  // exp of min(x, 0) for every element, so the loop has no branch and vectorizes.
  for (int64_t i = 0; i < n; ++i) {
    float x = y[i];
    float e = vexp(std::min(x, 0.0f));
    y[i] = x > 0.0f ? scale * x : scale * alpha * (e - 1.0f);
  }
}
void elu_all(float* y, int64_t n, float scale, float alpha) {
  core::vectorized([&] { elu_all_loop(y, n, scale, alpha); });
}

TANDEM_VECTORIZE void sigmoid_all_loop(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + vexp(-y[i]));
}
void sigmoid_all(float* y, int64_t n) {
  core::vectorized([&] { sigmoid_all_loop(y, n); });
}

TANDEM_VECTORIZE void tanh_all_loop(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f - 2.0f / (vexp(2.0f * y[i]) + 1.0f);
}
void tanh_all(float* y, int64_t n) {
  core::vectorized([&] { tanh_all_loop(y, n); });
}

void gelu_all(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * y[i] * (1.0f + std::erf(y[i] * 0.70710678118654752f));
}

TANDEM_VECTORIZE void backward_from_output_loop(const float* dy, const float* y, float* dz, int64_t n, Activation act) {
  switch (act) {
    case Activation::ReLU:
      for (int64_t i = 0; i < n; ++i) dz[i] = y[i] > 0.0f ? dy[i] : 0.0f;
      break;
    case Activation::ELU:
      for (int64_t i = 0; i < n; ++i) dz[i] = y[i] > 0.0f ? dy[i] : dy[i] * (y[i] + 1.0f);
      break;
    case Activation::SELU:
      for (int64_t i = 0; i < n; ++i)
        dz[i] = y[i] > 0.0f ? dy[i] * kSeluScale : dy[i] * (y[i] + kSeluScale * kSeluAlpha);
      break;
    case Activation::Sigmoid:
      for (int64_t i = 0; i < n; ++i) dz[i] = dy[i] * y[i] * (1.0f - y[i]);
      break;
    case Activation::Tanh:
      for (int64_t i = 0; i < n; ++i) dz[i] = dy[i] * std::fma(-y[i], y[i], 1.0f);
      break;
    case Activation::Linear:
      for (int64_t i = 0; i < n; ++i) dz[i] = dy[i];
      break;
    default: break;
  }
}
void backward_from_output(const float* dy, const float* y, float* dz, int64_t n, Activation act) {
  core::vectorized([&] { backward_from_output_loop(dy, y, dz, n, act); });
}

}  // namespace

void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) {
  if (act == Activation::ReLU) return relu_rows(y, bias, rows, cols);
  if (bias) bias_rows(y, bias, rows, cols);
  int64_t n = rows * cols;
  switch (act) {
    case Activation::Linear: break;
    case Activation::ReLU: break;
    case Activation::ELU: elu_all(y, n, 1.0f, 1.0f); break;
    case Activation::SELU: elu_all(y, n, kSeluScale, kSeluAlpha); break;
    case Activation::Sigmoid: sigmoid_all(y, n); break;
    case Activation::Tanh: tanh_all(y, n); break;
    case Activation::GELU: gelu_all(y, n); break;
    case Activation::Softmax:
      for (int64_t i = 0; i < rows; ++i) softmax_row(y + i * cols, cols, y + i * cols);
      break;
  }
}

bool activation_backward_needs_input(Activation act) { return act == Activation::GELU; }

void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols,
                         Activation act) {
  int64_t n = rows * cols;
  if (act == Activation::GELU) {
    for (int64_t i = 0; i < n; ++i) {
      float x = z[i];
      float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
      float pdf = 0.39894228040143268f * std::exp(-0.5f * x * x);
      dz[i] = dy[i] * (cdf + x * pdf);
    }
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
  backward_from_output(dy, y, dz, n, act);
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
