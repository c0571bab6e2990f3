// Batch normalization's per-channel statistics and elementwise passes over rows of c channels, on
// the op's intra-op threads (chunks of whole rows, cut by the shape alone) at the vector level
// core::isa() names. The statistics are summed in double, each chunk's rows in order, then the
// chunks' sums in order: the bits depend on the shape, not on the threads or the vector level
// (no fused multiply-add: this file is built with -ffp-contract=off, as the elementwise kernels).
// Their passes run at memory speed, so their work is counted in bytes (as the optimizer updates').
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "core/vectorize.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {

namespace {

// f(chunk, begin, end) over `chunks` chunks of whole rows; `bytes` read and written per element.
template <class F>
void over_rows(int64_t rows, int64_t c, int bytes, int64_t chunks, const F& f) {
  double work = static_cast<double>(rows) * static_cast<double>(c) * bytes;
  core::parallel_for(chunks, work, [&](int64_t k) {
    core::Range r = core::chunk_range(rows, chunks, k);
    if (r.end > r.begin) core::vectorized([&] { f(k, r.begin, r.end); });
  });
}

int64_t row_chunks(int64_t rows, int64_t c, int bytes) {
  return core::split_chunks(rows, static_cast<double>(rows) * static_cast<double>(c) * bytes);
}

// `width` sums per channel group over rows: each chunk's into its own `width` doubles (added row
// by row by add(row, sums)), then the chunks' added in order into `out`.
template <class Add>
void summed(int64_t rows, int64_t c, int bytes, int64_t width, double* out, const Add& add) {
  int64_t chunks = row_chunks(rows, c, bytes);
  std::vector<double> partial(static_cast<size_t>(chunks * width), 0.0);
  over_rows(rows, c, bytes, chunks, [&](int64_t k, int64_t begin, int64_t end) {
    double* sums = partial.data() + k * width;
    for (int64_t i = begin; i < end; ++i) add(i, sums);
  });
  for (int64_t j = 0; j < width; ++j) out[j] = 0.0;
  for (int64_t q = 0; q < chunks; ++q)
    for (int64_t j = 0; j < width; ++j) out[j] += partial[static_cast<size_t>(q * width + j)];
}

}  // namespace

void channel_sums(const float* x, int64_t rows, int64_t c, double* sums) {
  summed(rows, c, 4, c, sums, [&](int64_t i, double* s) {
    for (int64_t j = 0; j < c; ++j) s[j] += x[i * c + j];
  });
}

void squared_deviations(const float* x, const float* mean, int64_t rows, int64_t c, double* sums) {
  summed(rows, c, 4, c, sums, [&](int64_t i, double* s) {
    for (int64_t j = 0; j < c; ++j) {
      double e = x[i * c + j] - mean[j];
      s[j] += e * e;
    }
  });
}

void batch_norm_backward_sums(const float* dy, const float* x_hat, int64_t rows, int64_t c, double* sums) {
  summed(rows, c, 8, 2 * c, sums, [&](int64_t i, double* s) {
    for (int64_t j = 0; j < c; ++j) {
      s[j] += dy[i * c + j];
      s[c + j] += dy[i * c + j] * x_hat[i * c + j];
    }
  });
}

void batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                          float* x_hat, float* y, int64_t rows, int64_t c) {
  over_rows(rows, c, 12, row_chunks(rows, c, 12), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < c; ++j) {
        x_hat[i * c + j] = (x[i * c + j] - mean[j]) * rstd[j];
        y[i * c + j] = gamma[j] * x_hat[i * c + j] + beta[j];
      }
  });
}

void batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                               const double* sums, double n, float* dx, int64_t rows, int64_t c) {
  std::vector<float> scale(static_cast<size_t>(c)), mean_dy(static_cast<size_t>(c)), mean_dyx(static_cast<size_t>(c));
  for (int64_t j = 0; j < c; ++j) {
    scale[static_cast<size_t>(j)] = gamma[j] * rstd[j];
    mean_dy[static_cast<size_t>(j)] = static_cast<float>(sums[j] / n);
    mean_dyx[static_cast<size_t>(j)] = static_cast<float>(sums[c + j] / n);
  }
  const float *s = scale.data(), *m = mean_dy.data(), *mx = mean_dyx.data();
  over_rows(rows, c, 12, row_chunks(rows, c, 12), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < c; ++j) dx[i * c + j] = s[j] * (dy[i * c + j] - m[j] - x_hat[i * c + j] * mx[j]);
  });
}

void scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) dx[i] = gamma[i % c] * rstd[i % c] * dy[i];
}

void moving_average(float* moving, const float* value, int64_t n, float momentum) {
  for (int64_t j = 0; j < n; ++j) moving[j] = moving[j] * momentum + value[j] * (1.0f - momentum);
}

}  // namespace tandem::kernels::cpu
