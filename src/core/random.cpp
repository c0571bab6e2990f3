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

// Sixteen counter blocks at once, lane by lane, so that the compiler turns each round into
// vector multiplies (the scalar block() costs as much per block as this does per sixteen).
TANDEM_VECTORIZE
void blocks16_loop(uint64_t first_block, uint64_t stream, uint64_t seed, float* out) {
  uint32_t c0[16], c1[16], c2[16], c3[16];
  for (int l = 0; l < 16; ++l) {
    uint64_t counter = first_block + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(counter);
    c1[l] = static_cast<uint32_t>(counter >> 32);
    c2[l] = static_cast<uint32_t>(stream);
    c3[l] = static_cast<uint32_t>(stream >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < 16; ++l) {
      uint64_t p0 = uint64_t{kMul0} * c0[l], p1 = uint64_t{kMul1} * c2[l];
      uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0, n1 = static_cast<uint32_t>(p1);
      uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1, n3 = static_cast<uint32_t>(p0);
      c0[l] = n0;
      c1[l] = n1;
      c2[l] = n2;
      c3[l] = n3;
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  for (int l = 0; l < 16; ++l) {
    out[4 * l + 0] = static_cast<float>(c0[l] >> 8) * 0x1p-24f;
    out[4 * l + 1] = static_cast<float>(c1[l] >> 8) * 0x1p-24f;
    out[4 * l + 2] = static_cast<float>(c2[l] >> 8) * 0x1p-24f;
    out[4 * l + 3] = static_cast<float>(c3[l] >> 8) * 0x1p-24f;
  }
}
void blocks16(uint64_t first_block, uint64_t stream, uint64_t seed, float* out) {
  core::vectorized([&] { blocks16_loop(first_block, stream, seed, out); });
}

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
  while (n - k >= 64) {
    blocks16((first + static_cast<uint64_t>(k)) / 4, stream_, seed_, out + k);
    k += 64;
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
