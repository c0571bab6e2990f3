// Batch normalization's per-channel statistics and elementwise passes over rows of c channels.
// The statistics are summed in double, row by row in order, into host memory.
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {

void channel_sums(const float* x, int64_t rows, int64_t c, double* sums) {
  for (int64_t j = 0; j < c; ++j) sums[j] = 0.0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) sums[j] += x[i * c + j];
}

void squared_deviations(const float* x, const float* mean, int64_t rows, int64_t c, double* sums) {
  for (int64_t j = 0; j < c; ++j) sums[j] = 0.0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) {
      double e = x[i * c + j] - mean[j];
      sums[j] += e * e;
    }
}

void batch_norm_backward_sums(const float* dy, const float* x_hat, int64_t rows, int64_t c, double* sums) {
  for (int64_t j = 0; j < 2 * c; ++j) sums[j] = 0.0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) {
      sums[j] += dy[i * c + j];
      sums[c + j] += dy[i * c + j] * x_hat[i * c + j];
    }
}

void batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                          float* x_hat, float* y, int64_t rows, int64_t c) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) {
      x_hat[i * c + j] = (x[i * c + j] - mean[j]) * rstd[j];
      y[i * c + j] = gamma[j] * x_hat[i * c + j] + beta[j];
    }
}

void batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                               const double* sums, double n, float* dx, int64_t rows, int64_t c) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) {
      float scale = gamma[j] * rstd[j];
      dx[i * c + j] = scale * (dy[i * c + j] - static_cast<float>(sums[j] / n) -
                               x_hat[i * c + j] * static_cast<float>(sums[c + j] / n));
    }
}

void scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) dx[i] = gamma[i % c] * rstd[i % c] * dy[i];
}

void moving_average(float* moving, const float* value, int64_t n, float momentum) {
  for (int64_t j = 0; j < n; ++j) moving[j] = moving[j] * momentum + value[j] * (1.0f - momentum);
}

}  // namespace tandem::kernels::cpu
