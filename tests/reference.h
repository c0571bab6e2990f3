#pragma once
// Naive double-precision references for every op: obviously right, slow, and independent of the
// kernels they check (no oneDNN, no fused paths).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/ops.h"

namespace tandem::reference {

using Vec = std::vector<double>;

inline double act(double x, Activation a) {
  switch (a) {
    case Activation::Linear: return x;
    case Activation::ReLU: return x > 0 ? x : 0;
    case Activation::ELU: return x > 0 ? x : std::exp(x) - 1;
    case Activation::SELU: return 1.0507009873554804934 * (x > 0 ? x : 1.6732632423543772848 * (std::exp(x) - 1));
    case Activation::Tanh: return std::tanh(x);
    case Activation::Sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::GELU: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::Softmax: return x;  // handled per row
  }
  return x;
}

inline Vec activation(const Vec& x, int64_t cols, Activation a) {
  Vec y(x.size());
  if (a != Activation::Softmax) {
    for (size_t i = 0; i < x.size(); ++i) y[i] = act(x[i], a);
    return y;
  }
  for (size_t r = 0; r < x.size() / static_cast<size_t>(cols); ++r) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, x[r * cols + j]);
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = std::exp(x[r * cols + j] - m) / s;
  }
  return y;
}

// a:(m,k) (or stored (k,m) when ta), b:(k,n) (or (n,k) when tb).
inline Vec matmul(const Vec& a, const Vec& b, int64_t m, int64_t k, int64_t n, bool ta, bool tb) {
  Vec c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[ta ? p * m + i : i * k + p] * b[tb ? j * k + p : p * n + j];
  return c;
}

inline Vec log_softmax_row(const double* row, int64_t cols) {
  double m = -1e300, s = 0;
  for (int64_t j = 0; j < cols; ++j) m = std::max(m, row[j]);
  for (int64_t j = 0; j < cols; ++j) s += std::exp(row[j] - m);
  Vec out(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) out[j] = row[j] - m - std::log(s);
  return out;
}

struct ConvGeometry {
  int64_t n, h, w, c, kh, kw, f, sh, sw, oh, ow, pad_top, pad_left;
};

inline ConvGeometry conv_geometry(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t f,
                                  int64_t sh, int64_t sw, Padding padding) {
  ConvGeometry g{n, h, w, c, kh, kw, f, sh, sw, 0, 0, 0, 0};
  if (padding == Padding::Valid) {
    g.oh = (h - kh) / sh + 1;
    g.ow = (w - kw) / sw + 1;
  } else {
    g.oh = (h + sh - 1) / sh;
    g.ow = (w + sw - 1) / sw;
    g.pad_top = std::max<int64_t>((g.oh - 1) * sh + kh - h, 0) / 2;
    g.pad_left = std::max<int64_t>((g.ow - 1) * sw + kw - w, 0) / 2;
  }
  return g;
}

// x NHWC, kernel HWIO -> NHWC.
inline Vec conv2d(const Vec& x, const Vec& k, const Vec* bias, const ConvGeometry& g) {
  Vec y(static_cast<size_t>(g.n * g.oh * g.ow * g.f), 0.0);
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t o = 0; o < g.f; ++o) {
          double s = bias ? (*bias)[o] : 0.0;
          for (int64_t ky = 0; ky < g.kh; ++ky)
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              int64_t iy = oy * g.sh + ky - g.pad_top, ix = ox * g.sw + kx - g.pad_left;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              for (int64_t ci = 0; ci < g.c; ++ci)
                s += x[((b * g.h + iy) * g.w + ix) * g.c + ci] * k[((ky * g.kw + kx) * g.c + ci) * g.f + o];
            }
          y[((b * g.oh + oy) * g.ow + ox) * g.f + o] = s;
        }
  return y;
}

// Pooling over a window; average excludes padded cells (Keras).
inline Vec pool2d(const Vec& x, const ConvGeometry& g, bool max) {
  Vec y(static_cast<size_t>(g.n * g.oh * g.ow * g.c), 0.0);
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t ci = 0; ci < g.c; ++ci) {
          double best = -1e300, sum = 0;
          int count = 0;
          for (int64_t ky = 0; ky < g.kh; ++ky)
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              int64_t iy = oy * g.sh + ky - g.pad_top, ix = ox * g.sw + kx - g.pad_left;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              double v = x[((b * g.h + iy) * g.w + ix) * g.c + ci];
              best = std::max(best, v);
              sum += v;
              ++count;
            }
          y[((b * g.oh + oy) * g.ow + ox) * g.c + ci] = max ? best : sum / count;
        }
  return y;
}

// Training-mode batch norm over rows of c channels.
inline Vec batch_norm(const Vec& x, const Vec& gamma, const Vec& beta, int64_t c, double eps, bool training,
                      const Vec& moving_mean, const Vec& moving_var) {
  int64_t rows = static_cast<int64_t>(x.size()) / c;
  Vec y(x.size());
  for (int64_t j = 0; j < c; ++j) {
    double mu = 0, var = 0;
    if (training) {
      for (int64_t i = 0; i < rows; ++i) mu += x[i * c + j];
      mu /= rows;
      for (int64_t i = 0; i < rows; ++i) var += (x[i * c + j] - mu) * (x[i * c + j] - mu);
      var /= rows;
    } else {
      mu = moving_mean[j];
      var = moving_var[j];
    }
    for (int64_t i = 0; i < rows; ++i) y[i * c + j] = gamma[j] * (x[i * c + j] - mu) / std::sqrt(var + eps) + beta[j];
  }
  return y;
}

}  // namespace tandem::reference
