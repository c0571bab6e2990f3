// Elementwise families, sums and dropout masks, moved out of the ops so that every device
// brings its own.
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/over_elements.h"
#include "kernels/elements.h"
#include "tandem/random.h"

namespace tandem::kernels::cpu {

// The elementwise families run on the op's threads (over_elements: each element alone, so the
// bits do not depend on the cut); a residual network's adds and its ReLUs' gradients are passes
// over whole activations.
void unary(UnaryKind kind, const float* x, float* y, int64_t n, float factor, float low, float high) {
  over_elements(n, 8, [&](int64_t begin, int64_t count) {
    for (int64_t i = begin; i < begin + count; ++i)
      y[i] = elements::unary(static_cast<int>(kind), x[i], factor, low, high);
  });
}

void unary_backward(UnaryKind kind, const float* x, const float* g, float* d, int64_t n, float factor, float low,
                    float high) {
  over_elements(n, 12, [&](int64_t begin, int64_t count) {
    for (int64_t i = begin; i < begin + count; ++i)
      d[i] = elements::unary_backward(static_cast<int>(kind), x == nullptr ? 0.0f : x[i], g[i], factor, low, high);
  });
}

void binary(BinaryKind kind, const float* a, const float* b, float* y, int64_t n, int64_t b_n) {
  bool bcast = b_n < n;
  over_elements(n, 12, [&](int64_t begin, int64_t count) {
    if (bcast) {
      for (int64_t i = begin; i < begin + count; ++i) y[i] = elements::binary(static_cast<int>(kind), a[i], b[i % b_n]);
    } else {
      for (int64_t i = begin; i < begin + count; ++i) y[i] = elements::binary(static_cast<int>(kind), a[i], b[i]);
    }
  });
}

double sum(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

void dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per_sample, float rate, uint64_t seed,
             uint64_t step, int64_t sample_offset, int64_t features, int64_t feature_offset) {
  Philox rng(seed, step);
  float keep_scale = 1.0f / (1.0f - rate);
  for (int64_t i = 0; i < rows; ++i) {
    // The row's uniforms go into its mask slots first, then become 0 or 1/(1-rate).
    float* row = mask + i * per_sample;
    rng.uniforms(static_cast<uint64_t>((sample_offset + i) * features + feature_offset), per_sample, row);
    for (int64_t j = 0; j < per_sample; ++j) {
      row[j] = row[j] < rate ? 0.0f : keep_scale;
      y[i * per_sample + j] = x[i * per_sample + j] * row[j];
    }
  }
}

}  // namespace tandem::kernels::cpu
