// Convolutions over few input values per window (kh·kw·c ≤ 32: a first layer over grey or RGB
// images), as loops of Tandem's own: vectorized along the filters, each output's sum (the bias,
// then every tap in kernel order) and each weight gradient's (output positions in order) in a
// fixed order. oneDNN's direct kernels spend most of their time on such a layer's memory layout
// (the cnn preset's 1 → 32 channels 3×3 on 64 images, one core: forward 0.37 ms, backward-weights
// 0.51 ms, 2026-11-26).
#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {

constexpr int64_t kFilterBlock = 16;  // filters conv2d_is_small asks whole blocks of

constexpr int64_t kMaxTaps = 32;  // conv2d_is_small's bound on kh·kw·c

// The offset of each kernel tap (i, j, c) from its window's first input value, in kernel order
// (kh·kw·c of them; no allocation on the step's path).
std::array<int64_t, kMaxTaps> tap_offsets(const Conv2dShape& s) {
  std::array<int64_t, kMaxTaps> offsets{};
  int64_t t = 0;
  for (int64_t i = 0; i < s.kh; ++i)
    for (int64_t j = 0; j < s.kw; ++j)
      for (int64_t c = 0; c < s.c; ++c) offsets[static_cast<size_t>(t++)] = (i * s.w + j) * s.c + c;
  return offsets;
}

// Vectors of filters as each level's registers hold them: 16 floats at AVX-512, 8 at AVX2 (and at
// plain x86-64, two SSE registers). The helpers are inlined into each level's copy and the vectors
// stay inside this file's functions, so GCC's -Wpsabi note (vectors passed between code built for
// different ISAs) does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Lanes16 __attribute__((vector_size(16 * sizeof(float))));
typedef float Lanes8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t IntLanes16 __attribute__((vector_size(16 * sizeof(int32_t))));
typedef int32_t IntLanes8 __attribute__((vector_size(8 * sizeof(int32_t))));

// Per level: the vector types, forward's output positions computed together (independent sums)
// and its vectors of filters a pass (accumulators: positions × vectors, within the 32 registers of
// AVX-512 and the 16 of AVX2 with the weights and a broadcast beside them); the weight gradient's
// taps and vectors of filters a pass (accumulators: taps × vectors, beside the output gradient's
// vectors and the bias's). Measured on the cnn's first layer (16 images, one Zen 4 core, the
// weight gradient from a pooled gradient): AVX-512 9 × 2 74.5 µs, 9 × 1 82; AVX2 5 × 2 92 µs,
// 9 × 1 103.
template <core::Isa L>
struct Blocking;
template <>
struct Blocking<core::Isa::Avx512> {
  using Lanes = Lanes16;
  using IntLanes = IntLanes16;
  static constexpr int kPositions = 8, kVectors = 2;
  static constexpr int kWeightTaps = 9, kWeightVectors = 2;
};
template <core::Isa L>
struct Blocking {
  using Lanes = Lanes8;
  using IntLanes = IntLanes8;
  static constexpr int kPositions = 6, kVectors = 2;
  static constexpr int kWeightTaps = 5, kWeightVectors = 2;
};

template <class V>
TANDEM_VECTORIZE V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
TANDEM_VECTORIZE void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// One image, filters [f0, f0 + W·Vectors) for W-float Lanes: y(oh, ow) = bias + Σ over taps in
// kernel order of x · kernel, Positions positions at once.
template <class Lanes, int Positions, int Vectors>
TANDEM_VECTORIZE void small_forward_block(const Conv2dShape& s, const int64_t* __restrict taps, int64_t k,
                                          const float* __restrict x, const float* __restrict kernel,
                                          const float* __restrict bias, int64_t f0, float* __restrict y) {
  constexpr int64_t W = sizeof(Lanes) / sizeof(float);
  const Lanes zero{};
  Lanes start[Vectors];
  for (int b = 0; b < Vectors; ++b) start[b] = bias != nullptr ? load<Lanes>(bias + f0 + b * W) : zero;
  // Positions in output order across rows, Positions at a time (the last block repeats the image's
  // last position); (oh, ow) is the block's first.
  int64_t positions = s.oh * s.ow;
  for (int64_t first = 0, oh = 0, ow = 0; first < positions; first += Positions) {
    const float* at[Positions];
    Lanes acc[Positions][Vectors];
#pragma GCC unroll 8
    for (int64_t q = 0; q < Positions; ++q) {
      at[q] = x + (oh * s.sh * s.w + ow * s.sw) * s.c;
      for (int b = 0; b < Vectors; ++b) acc[q][b] = start[b];
      if (first + q + 1 < positions && ++ow == s.ow) ow = 0, ++oh;
    }
    for (int64_t t = 0; t < k; ++t) {
      Lanes w[Vectors];
      for (int b = 0; b < Vectors; ++b) w[b] = load<Lanes>(kernel + t * s.f + f0 + b * W);
      int64_t offset = taps[t];
#pragma GCC unroll 8
      for (int64_t q = 0; q < Positions; ++q) {
        float v = at[q][offset];
        for (int b = 0; b < Vectors; ++b) acc[q][b] += v * w[b];
      }
    }
    for (int64_t q = 0; q < std::min<int64_t>(Positions, positions - first); ++q)
      for (int b = 0; b < Vectors; ++b)
        store(y + (first + q) * s.f + f0 + b * W, s.fused_relu ? (acc[q][b] > zero ? acc[q][b] : zero) : acc[q][b]);
  }
}

// One image, filters [f0, f0 + W·Vectors) for W-float Lanes, taps [t0, t0 + Taps) (past the last:
// repeats of it, not written): each tap's weight gradient over the image's positions in order,
// added to dkernel; with dbias, the bias gradient too. Unpooled: the output gradient read from a
// 2 × 2 max pooling's (the same values its backward would write).
template <class Lanes, class IntLanes, bool Unpooled, int Taps, int Vectors>
TANDEM_VECTORIZE void small_weights_block(const Conv2dShape& s, const int64_t* __restrict taps, int64_t k, int64_t t0,
                                          const float* __restrict x, const ConvOutputGradient& g, int64_t f0,
                                          float* __restrict dkernel, float* __restrict dbias) {
  constexpr int64_t W = sizeof(Lanes) / sizeof(float);
  int64_t offset[Taps];
  Lanes acc[Taps][Vectors], bias_acc[Vectors];
#pragma GCC unroll 9
  for (int u = 0; u < Taps; ++u) {
    offset[u] = taps[std::min(t0 + u, k - 1)];
    for (int v = 0; v < Vectors; ++v) acc[u][v] = Lanes{};
  }
  for (int v = 0; v < Vectors; ++v) bias_acc[v] = Lanes{};
  for (int64_t oh = 0; oh < s.oh; ++oh)
    for (int64_t ow = 0; ow < s.ow; ++ow) {
      const float* at = x + (oh * s.sh * s.w + ow * s.sw) * s.c;
      Lanes d[Vectors];
      for (int v = 0; v < Vectors; ++v) {
        if constexpr (Unpooled) {
          int64_t pooled = ((oh / 2) * (s.ow / 2) + ow / 2) * s.f + f0 + v * W;
          // The mask by integer arithmetic (a vector comparison here compiles to scalar code): all
          // ones where the window's maximum is this position.
          auto window = static_cast<int32_t>((oh % 2) * 2 + ow % 2);
          IntLanes arg = load<IntLanes>(g.arg + pooled),
                   bits = load<IntLanes>(g.dp + pooled) & (((arg ^ window) - 1) >> 31);
          std::memcpy(&d[v], &bits, sizeof d[v]);
        } else {
          d[v] = load<Lanes>(g.dy + (oh * s.ow + ow) * s.f + f0 + v * W);
        }
      }
#pragma GCC unroll 9
      for (int u = 0; u < Taps; ++u) {
        float in = at[offset[u]];
        for (int v = 0; v < Vectors; ++v) acc[u][v] += in * d[v];
      }
      for (int v = 0; v < Vectors; ++v) bias_acc[v] += d[v];
    }
  for (int64_t u = 0; u < std::min<int64_t>(Taps, k - t0); ++u)
    for (int v = 0; v < Vectors; ++v) {
      float* gk = dkernel + (t0 + u) * s.f + f0 + v * W;
      store(gk, load<Lanes>(gk) + acc[u][v]);
    }
  if (dbias != nullptr)
    for (int v = 0; v < Vectors; ++v) store(dbias + f0 + v * W, load<Lanes>(dbias + f0 + v * W) + bias_acc[v]);
}

#pragma GCC diagnostic pop

}  // namespace

// Valid padding (every window inside the input), whole 16-filter blocks, float32 products.
bool conv2d_is_small(const Conv2dShape& s) {
  return !s.bf16 && s.kh * s.kw * s.c <= kMaxTaps && s.f % kFilterBlock == 0 && s.pad_top == 0 && s.pad_left == 0 &&
         s.pad_bottom == 0 && s.pad_right == 0;
}

void conv2d_small_forward(const Conv2dShape& s, const float* x, const float* kernel, const float* bias, float* y) {
  std::array<int64_t, kMaxTaps> taps = tap_offsets(s);
  int64_t k = s.kh * s.kw * s.c;
  core::vectorized([&](auto at_isa) {
    using Level = Blocking<decltype(at_isa)::level>;
    constexpr int64_t kPass = Level::kVectors * static_cast<int64_t>(sizeof(typename Level::Lanes) / sizeof(float));
    for (int64_t n = 0; n < s.n; ++n) {
      const float* image = x + n * s.h * s.w * s.c;
      float* out = y + n * s.oh * s.ow * s.f;
      int64_t f0 = 0;
      for (; f0 + kPass <= s.f; f0 += kPass)
        small_forward_block<typename Level::Lanes, Level::kPositions, Level::kVectors>(s, taps.data(), k, image, kernel,
                                                                                       bias, f0, out);
      // The rest (whole 16-filter blocks) a vector at a time.
      constexpr int64_t W = sizeof(typename Level::Lanes) / sizeof(float);
      for (; f0 < s.f; f0 += W)
        small_forward_block<typename Level::Lanes, Level::kPositions, 1>(s, taps.data(), k, image, kernel, bias, f0,
                                                                         out);
    }
  });
}

void conv2d_small_backward_weights(const Conv2dShape& s, const float* x, const ConvOutputGradient& g, float* dkernel,
                                   float* dbias) {
  std::array<int64_t, kMaxTaps> taps = tap_offsets(s);
  int64_t k = s.kh * s.kw * s.c;
  std::fill(dkernel, dkernel + k * s.f, 0.0f);
  if (dbias != nullptr) std::fill(dbias, dbias + s.f, 0.0f);
  bool unpooled = g.dy == nullptr;
  int64_t out_image = s.oh * s.ow * s.f, pooled_image = out_image / 4;
  core::vectorized([&](auto at_isa) {
    using Level = Blocking<decltype(at_isa)::level>;
    using Lanes = typename Level::Lanes;
    using IntLanes = typename Level::IntLanes;
    constexpr int64_t W = sizeof(Lanes) / sizeof(float);
    for (int64_t n = 0; n < s.n; ++n) {
      const float* image = x + n * s.h * s.w * s.c;
      ConvOutputGradient at = unpooled ? ConvOutputGradient{nullptr, g.dp + n * pooled_image, g.arg + n * pooled_image}
                                       : ConvOutputGradient{g.dy + n * out_image};
      // kWeightVectors vectors of filters a pass while whole ones remain, then one at a time.
      auto pass = [&]<int Vectors>(int64_t f0) {
        for (int64_t t0 = 0; t0 < k; t0 += Level::kWeightTaps) {
          float* db = t0 == 0 ? dbias : nullptr;
          if (unpooled)
            small_weights_block<Lanes, IntLanes, true, Level::kWeightTaps, Vectors>(s, taps.data(), k, t0, image, at,
                                                                                    f0, dkernel, db);
          else
            small_weights_block<Lanes, IntLanes, false, Level::kWeightTaps, Vectors>(s, taps.data(), k, t0, image, at,
                                                                                     f0, dkernel, db);
        }
      };
      int64_t f0 = 0;
      for (; f0 + W * Level::kWeightVectors <= s.f; f0 += W * Level::kWeightVectors)
        pass.template operator()<Level::kWeightVectors>(f0);
      for (; f0 < s.f; f0 += W) pass.template operator()<1>(f0);
    }
  });
}

}  // namespace tandem::kernels::cpu
