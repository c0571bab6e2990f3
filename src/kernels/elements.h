#pragma once
// One formula per op for every device: what a kernel computes for one element, one row's value
// or one Philox word, written once. The CPU's kernels (src/kernels/cpu, g++ C++20, inside their
// vectorized loops) and the CUDA device's (src/cuda/*.cu, nvcc C++17, grids that only index) call
// these same functions, so an element has the same bits on both where the device's math library
// agrees with glibc's (exp is this polynomial on both; log, erf and sqrt are each side's correctly
// rounded or near-correct ones). Multiply-adds are written out (fmaf): the CPU's files compile with
// -ffp-contract=off and the CUDA kernels with --fmad=false, so no compiler fuses another.
//
// C++17, plain C headers and no other Tandem header: nvcc compiles it too.
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TANDEM_HD __host__ __device__ inline
#else
// Inlined into the vectorized copy of the loop that calls it (core/vectorize.h's rule).
#define TANDEM_HD inline __attribute__((always_inline))
#endif

namespace tandem::kernels::elements {

// kernels::cpu's enums, as numbers (the backends pass them through unchanged).
enum Unary : int { kScale = 0, kSquare = 1, kLog = 2, kClip = 3, kAbs = 4 };
enum Binary : int { kAdd = 0, kSub = 1, kMul = 2 };
enum Act : int { kLinear = 0, kReLU = 1, kELU = 2, kSELU = 3, kTanh = 4, kSigmoid = 5, kGELU = 6, kSoftmax = 7 };
enum Pointwise : int { kSquaredError = 0, kBinaryCrossEntropyLogits = 1, kBinaryCrossEntropy = 2 };

constexpr float kSeluScale = 1.0507009873554804934f;
constexpr float kSeluAlpha = 1.6732632423543772848f;
constexpr float kLossEpsilon = 1e-7f;

TANDEM_HD float bits_to_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// std::min and std::max, NaN and -0 included: a NaN first argument comes back, as on the CPU
// (ReLU and clip keep a NaN: a diverging run shows).
TANDEM_HD float min_f(float a, float b) { return b < a ? b : a; }
TANDEM_HD float max_f(float a, float b) { return a < b ? b : a; }

// exp that vectorizes (glibc's expf is a scalar call): Cephes' range reduction and polynomial,
// within about 2 ulp over the float range.
TANDEM_HD float exp_poly(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  float n = floorf(fmaf(x, 1.44269504088896341f, 0.5f));
  float r = fmaf(n, 2.12194440e-4f, fmaf(-n, 0.693359375f, x));
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  float y = fmaf(p * r, r, r) + 1.0f;
  return y * bits_to_float(static_cast<uint32_t>((static_cast<int32_t>(n) + 127) << 23));
}

// Philox4x32-10 (core/random.cpp): word `index` of the stream (seed, stream).
TANDEM_HD uint32_t philox_word(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t counter = index / 4;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c0, p1 = uint64_t{0xCD9E8D57u} * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  switch (index % 4) {
    case 0: return c0;
    case 1: return c1;
    case 2: return c2;
    default: return c3;
  }
}
TANDEM_HD float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(philox_word(seed, stream, index) >> 8) * 0x1p-24f;
}
// Dropout's mask value at (row, j): 0 or 1/(1-rate) (kernels::cpu::dropout).
TANDEM_HD float dropout_mask(uint64_t seed, uint64_t step, int64_t sample_offset, int64_t row, int64_t features,
                             int64_t feature_offset, int64_t j, float rate) {
  uint64_t first = static_cast<uint64_t>((sample_offset + row) * features + feature_offset);
  return philox_uniform(seed, step, first + static_cast<uint64_t>(j)) < rate ? 0.0f : 1.0f / (1.0f - rate);
}

TANDEM_HD float unary(int kind, float x, float factor, float low, float high) {
  return kind == kScale    ? factor * x
         : kind == kSquare ? x * x
         : kind == kLog    ? logf(x)
         : kind == kAbs    ? fabsf(x)
                           : min_f(max_f(x, low), high);
}
TANDEM_HD float unary_backward(int kind, float x, float dy, float factor, float low, float high) {
  return kind == kScale    ? factor * dy
         : kind == kSquare ? 2.0f * x * dy
         : kind == kLog    ? dy / x
         : kind == kAbs    ? (x > 0.0f   ? dy
                              : x < 0.0f ? -dy
                                         : 0.0f)
                           : (x >= low && x <= high ? dy : 0.0f);
}
TANDEM_HD float binary(int kind, float a, float b) { return kind == kAdd ? a + b : kind == kSub ? a - b : a * b; }

// An elementwise activation of z (Softmax acts on rows: softmax_* below).
TANDEM_HD float activation(int act, float z) {
  switch (act) {
    case kReLU: return max_f(z, 0.0f);
    case kELU: return z > 0.0f ? z : 1.0f * (exp_poly(min_f(z, 0.0f)) - 1.0f);
    case kSELU: return z > 0.0f ? kSeluScale * z : kSeluScale * kSeluAlpha * (exp_poly(min_f(z, 0.0f)) - 1.0f);
    case kSigmoid: return 1.0f / (1.0f + exp_poly(-z));
    case kTanh: return 1.0f - 2.0f / (exp_poly(2.0f * z) + 1.0f);
    case kGELU: return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    default: return z;
  }
}
// dz from dy, the output y and (GELU only) the input z.
TANDEM_HD float activation_backward(int act, float dy, float z, float y) {
  switch (act) {
    case kReLU: return y > 0.0f ? dy : 0.0f;
    case kELU: return y > 0.0f ? dy : dy * (y + 1.0f);
    case kSELU: return y > 0.0f ? dy * kSeluScale : dy * (y + kSeluScale * kSeluAlpha);
    case kSigmoid: return dy * y * (1.0f - y);
    case kTanh: return dy * fmaf(-y, y, 1.0f);
    case kGELU: {
      float cdf = 0.5f * (1.0f + erff(z * 0.70710678118654752f));
      float pdf = 0.39894228040143268f * expf(-0.5f * z * z);
      return dy * (cdf + z * pdf);
    }
    default: return dy;
  }
}

// Softmax of one row (p may be row): returns log Σ exp(row).
TANDEM_HD float softmax_row(const float* row, int64_t cols, float* p) {
  float m = row[0];
  for (int64_t j = 1; j < cols; ++j) m = max_f(m, row[j]);
  float s = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    p[j] = exp_poly(row[j] - m);
    s += p[j];
  }
  float inv = 1.0f / s;
  for (int64_t j = 0; j < cols; ++j) p[j] *= inv;
  return logf(s) + m;
}

// One element's term of a per-row pointwise loss (summed in double, divided by the row's size).
TANDEM_HD double pointwise_term(int kind, float p, float t) {
  if (kind == kSquaredError) {
    double e = p - t;  // in float, then widened, as the CPU
    return e * e;
  }
  if (kind == kBinaryCrossEntropyLogits) return max_f(p, 0.0f) - p * t + log1pf(expf(-fabsf(p)));
  float c = min_f(max_f(p, kLossEpsilon), 1.0f - kLossEpsilon);
  return -(t * logf(c) + (1.0f - t) * logf(1.0f - c));
}
// Its gradient given the row's dy (dy_row) and size.
TANDEM_HD float pointwise_gradient(int kind, float p, float t, float dy_row, int64_t per_row) {
  if (kind == kSquaredError) return (2.0f * dy_row / static_cast<float>(per_row)) * (p - t);
  float g = dy_row / static_cast<float>(per_row);
  if (kind == kBinaryCrossEntropyLogits) return g * (1.0f / (1.0f + expf(-p)) - t);
  return (p < kLossEpsilon || p > 1.0f - kLossEpsilon) ? 0.0f : g * (p - t) / (p * (1.0f - p));
}

// Optimizer updates of one element, in Keras' forms. SGD with momentum: v = momentum·v - lr·g;
// w += v, or momentum·v - lr·g with Nesterov. Adam's alpha folds the bias corrections in,
// computed once on the host (adam_alpha); epsilon stays outside the square root.
TANDEM_HD void sgd(float& w, float g, float lr) { w -= lr * g; }
TANDEM_HD void sgd_momentum(float& w, float g, float& velocity, float lr, float momentum, bool nesterov) {
  float v = momentum * velocity - lr * g;
  velocity = v;
  w += nesterov ? momentum * v - lr * g : v;
}
inline float adam_alpha(float lr, float beta1, float beta2, int64_t step) {
  double t = static_cast<double>(step);
  return static_cast<float>(lr * sqrt(1.0 - pow(beta2, t)) / (1.0 - pow(beta1, t)));
}
TANDEM_HD void adam(float& w, float g, float& m, float& v, float alpha, float beta1, float beta2, float epsilon) {
  float mi = m + (1.0f - beta1) * (g - m);
  float vi = v + (1.0f - beta2) * (g * g - v);
  m = mi;
  v = vi;
  w -= alpha * mi / (sqrtf(vi) + epsilon);
}
TANDEM_HD void rmsprop(float& w, float g, float& mean_square, float* velocity, float lr, float rho, float momentum,
                       float epsilon) {
  float ms = rho * mean_square + (1.0f - rho) * g * g;
  mean_square = ms;
  float step = lr * g / (sqrtf(ms) + epsilon);
  if (velocity != nullptr) {
    float vel = momentum * *velocity + step;
    *velocity = vel;
    w -= vel;
  } else {
    w -= step;
  }
}
TANDEM_HD void adagrad(float& w, float g, float& accumulator, float lr, float epsilon) {
  float a = accumulator + g * g;
  accumulator = a;
  w -= lr * g / (sqrtf(a) + epsilon);
}

// bf16 of x: to nearest, ties to even, NaN kept a NaN.
TANDEM_HD uint16_t to_bf16(float x) {
#ifdef __CUDA_ARCH__
  uint32_t u = __float_as_uint(x);
#else
  uint32_t u = __builtin_bit_cast(uint32_t, x);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A window over an NHWC image (a convolution's kernel, a pooling window), and a convolution as a
// product (NHWC input, HWIO kernel): the im2col matrix has a row per output
// place r = (n·oh + oy)·ow + ox and a column per window place k = (ky·kw + kx)·c + ci, holding the
// input at (n, oy·sh - pad_top + ky, ox·sw - pad_left + kx, ci), 0 over the padding; the output is
// that matrix times the kernel (kh·kw·c × f).
struct ConvGeometry {
  int64_t h, w, c, kh, kw, sh, sw, pad_top, pad_left, oh, ow;
};
// Every place of output (oy, ox)'s window that lies inside the input, row by row:
// visit(place, iy, ix) with place = ky·kw + kx (the pooling's argmax index).
template <class Visit>
TANDEM_HD void window_places(const ConvGeometry& g, int64_t oy, int64_t ox, Visit visit) {
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    int64_t iy = oy * g.sh - g.pad_top + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      int64_t ix = ox * g.sw - g.pad_left + kx;
      if (ix >= 0 && ix < g.w) visit(ky * g.kw + kx, iy, ix);
    }
  }
}
// How many of output o's window [o·stride - pad, … + window) fall inside 0 … size - 1 along one
// axis (average pooling's divisor: the padding is not counted).
TANDEM_HD int64_t window_inside(int64_t o, int64_t stride, int64_t pad, int64_t window, int64_t size) {
  int64_t begin = o * stride - pad, end = begin + window;
  return (end < size ? end : size) - (begin > 0 ? begin : 0);
}
// The input element im2col's (r, k) reads, or -1 where its window hangs over the padding.
TANDEM_HD int64_t im2col_source(const ConvGeometry& g, int64_t r, int64_t k) {
  int64_t ci = k % g.c, kx = (k / g.c) % g.kw, ky = k / (g.c * g.kw);
  int64_t ox = r % g.ow, oy = (r / g.ow) % g.oh, n = r / (g.ow * g.oh);
  int64_t iy = oy * g.sh - g.pad_top + ky, ix = ox * g.sw - g.pad_left + kx;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return -1;
  return ((n * g.h + iy) * g.w + ix) * g.c + ci;
}
// Every (r, k) of the im2col matrix that reads input element e, in the order of ky then kx:
// visit(r, k) for each (the input gradient gathers the column gradient's values there).
template <class Visit>
TANDEM_HD void im2col_readers(const ConvGeometry& g, int64_t e, Visit visit) {
  int64_t ci = e % g.c, ix = (e / g.c) % g.w, iy = (e / (g.c * g.w)) % g.h, n = e / (g.c * g.w * g.h);
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    int64_t ty = iy + g.pad_top - ky;
    if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      int64_t tx = ix + g.pad_left - kx;
      if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
      visit((n * g.oh + ty / g.sh) * g.ow + tx / g.sw, (ky * g.kw + kx) * g.c + ci);
    }
  }
}

}  // namespace tandem::kernels::elements
