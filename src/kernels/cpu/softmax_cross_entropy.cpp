// Softmax fused with cross-entropy: one pass gives the loss and the probabilities that the
// backward pass turns into (p - target) without ever forming log(softmax).
#include "kernels/cpu/kernels.h"
#include "kernels/elements.h"

namespace tandem::kernels::cpu {
float softmax_row(const float* row, int64_t cols, float* p) {
  return core::vectorized([&] { return elements::softmax_row(row, cols, p); });
}

void sparse_softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, float* loss,
                                  float* probabilities) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = logits + i * cols;
    float log_z = softmax_row(row, cols, probabilities + i * cols);
    loss[i] = log_z - row[labels[i]];
  }
}

void softmax_cross_entropy(const float* logits, const float* targets, int64_t rows, int64_t cols, float* loss,
                           float* probabilities) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = logits + i * cols;
    const float* t = targets + i * cols;
    float log_z = softmax_row(row, cols, probabilities + i * cols);
    float l = 0.0f;
    for (int64_t j = 0; j < cols; ++j) l += t[j] * (log_z - row[j]);
    loss[i] = l;
  }
}

void cross_entropy_backward(const float* p, const int32_t* labels, const float* targets, const float* g, float* d,
                            int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    if (labels != nullptr) {
      for (int64_t j = 0; j < cols; ++j) d[i * cols + j] = g[i] * p[i * cols + j];
      d[i * cols + labels[i]] -= g[i];
    } else {
      const float* t = targets + i * cols;
      float total = 0.0f;
      for (int64_t j = 0; j < cols; ++j) total += t[j];
      for (int64_t j = 0; j < cols; ++j) d[i * cols + j] = g[i] * (p[i * cols + j] * total - t[j]);
    }
  }
}

}  // namespace tandem::kernels::cpu
