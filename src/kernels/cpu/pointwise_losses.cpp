// Mean squared error and binary cross-entropy per row, and their gradients.
#include "kernels/cpu/kernels.h"
#include "kernels/elements.h"

namespace tandem::kernels::cpu {

void pointwise_loss(PointwiseLoss kind, const float* px, const float* pt, float* loss, int64_t rows, int64_t per_row) {
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0.0;
    for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j)
      s += elements::pointwise_term(static_cast<int>(kind), px[j], pt[j]);
    loss[i] = static_cast<float>(s / static_cast<double>(per_row));
  }
}

void pointwise_loss_backward(PointwiseLoss kind, const float* px, const float* pt, const float* g, float* d,
                             int64_t rows, int64_t per_row) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = i * per_row; j < (i + 1) * per_row; ++j)
      d[j] = elements::pointwise_gradient(static_cast<int>(kind), px[j], pt[j], g[i], per_row);
}

}  // namespace tandem::kernels::cpu
