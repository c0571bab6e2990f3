// Mean squared error and binary cross-entropy per row, and their gradients.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {
constexpr float kEpsilon = 1e-7f;
}

void pointwise_loss(PointwiseLoss kind, const float* px, const float* pt, float* loss, int64_t rows, int64_t per_row) {
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0.0;
    for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j) {
      if (kind == PointwiseLoss::SquaredError) {
        double e = px[j] - pt[j];
        s += e * e;
      } else if (kind == PointwiseLoss::BinaryCrossEntropyLogits) {
        // max(x,0) - x·t + log(1 + exp(-|x|)): no overflow for large |x|.
        s += std::max(px[j], 0.0f) - px[j] * pt[j] + std::log1p(std::exp(-std::fabs(px[j])));
      } else {
        float p = std::clamp(px[j], kEpsilon, 1.0f - kEpsilon);
        s += -(pt[j] * std::log(p) + (1.0f - pt[j]) * std::log(1.0f - p));
      }
    }
    loss[i] = static_cast<float>(s / static_cast<double>(per_row));
  }
}

void pointwise_loss_backward(PointwiseLoss kind, const float* px, const float* pt, const float* g, float* d,
                             int64_t rows, int64_t per_row) {
  for (int64_t i = 0; i < rows; ++i) {
    if (kind == PointwiseLoss::SquaredError) {
      float gi = 2.0f * g[i] / static_cast<float>(per_row);
      for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j) d[j] = gi * (px[j] - pt[j]);
      continue;
    }
    float gi = g[i] / static_cast<float>(per_row);
    for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j) {
      if (kind == PointwiseLoss::BinaryCrossEntropyLogits) {
        d[j] = gi * (1.0f / (1.0f + std::exp(-px[j])) - pt[j]);
      } else {
        float p = px[j];
        d[j] = (p < kEpsilon || p > 1.0f - kEpsilon) ? 0.0f : gi * (p - pt[j]) / (p * (1.0f - p));
      }
    }
  }
}

}  // namespace tandem::kernels::cpu
