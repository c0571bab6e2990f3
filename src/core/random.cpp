#include "tandem/random.h"

#include "core/vectorize.h"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t{a} * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

std::array<uint32_t, 4> Philox::block(uint64_t counter) const {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream_), c3 = static_cast<uint32_t>(stream_ >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed_), k1 = static_cast<uint32_t>(seed_ >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

float Philox::normal(uint64_t index) const {
  auto words = block(index / 2);
  int half = static_cast<int>(index % 2) * 2;
  // u1 in (0, 1] so that log never sees zero.
  float u1 = (static_cast<float>(words[static_cast<size_t>(half)] >> 8) + 1.0f) * 0x1p-24f;
  float u2 = static_cast<float>(words[static_cast<size_t>(half + 1)] >> 8) * 0x1p-24f;
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

namespace {

// Sixteen counter blocks at once, one per lane of GCC's vector types, so that each round is a few
// vector multiplies and shuffles at every level (written lane by lane over plain arrays, GCC left
// the rounds scalar: 3,200 uniforms, a dropout mask of the tutorial MLP, took 12.2 µs; now
// 4.1 µs at AVX-512 and 8.1–8.7 µs at AVX2, one Zen 4 core). `groups` runs of sixteen blocks from
// first_block, 64 floats each.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef uint32_t U32x16 __attribute__((vector_size(64)));
typedef uint64_t U64x16 __attribute__((vector_size(128)));
typedef float F32x16 __attribute__((vector_size(64)));

TANDEM_VECTORIZE void blocks16_loop(uint64_t first_block, int64_t groups, uint64_t stream, uint64_t seed, float* out) {
  const U64x16 lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int64_t g = 0; g < groups; ++g, out += 64) {
    U64x16 counter = first_block + static_cast<uint64_t>(16 * g) + lanes;
    U32x16 c0 = __builtin_convertvector(counter, U32x16), c1 = __builtin_convertvector(counter >> 32, U32x16);
    U32x16 c2 = U32x16{} + static_cast<uint32_t>(stream), c3 = U32x16{} + static_cast<uint32_t>(stream >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      U64x16 p0 = __builtin_convertvector(c0, U64x16) * kMul0, p1 = __builtin_convertvector(c2, U64x16) * kMul1;
      c0 = __builtin_convertvector(p1 >> 32, U32x16) ^ c1 ^ k0;
      c1 = __builtin_convertvector(p1, U32x16);
      c2 = __builtin_convertvector(p0 >> 32, U32x16) ^ c3 ^ k1;
      c3 = __builtin_convertvector(p0, U32x16);
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    F32x16 f[4] = {
        __builtin_convertvector(c0 >> 8, F32x16) * 0x1p-24f, __builtin_convertvector(c1 >> 8, F32x16) * 0x1p-24f,
        __builtin_convertvector(c2 >> 8, F32x16) * 0x1p-24f, __builtin_convertvector(c3 >> 8, F32x16) * 0x1p-24f};
    for (int l = 0; l < 16; ++l)
      for (int w = 0; w < 4; ++w) out[4 * l + w] = f[w][l];
  }
}
#pragma GCC diagnostic pop

}  // namespace

void Philox::uniforms(uint64_t first, int64_t n, float* out) const {
  int64_t k = 0;
  // Scalar blocks until the index is block-aligned and for the tail; sixteen blocks at a time between.
  auto scalar_until = [&](int64_t limit) {
    while (k < limit) {
      uint64_t index = first + static_cast<uint64_t>(k);
      auto words = block(index / 4);
      for (uint64_t w = index % 4; w < 4 && k < limit; ++w, ++k) out[k] = static_cast<float>(words[w] >> 8) * 0x1p-24f;
    }
  };
  scalar_until(std::min<int64_t>(n, static_cast<int64_t>((4 - first % 4) % 4)));
  if (int64_t groups = (n - k) / 64; groups > 0) {
    core::vectorized([&] { blocks16_loop((first + static_cast<uint64_t>(k)) / 4, groups, stream_, seed_, out + k); });
    k += 64 * groups;
  }
  scalar_until(n);
}

uint64_t mix_seed(uint64_t seed, uint64_t salt) {
  // splitmix64 finalizer over seed and salt.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace tandem
