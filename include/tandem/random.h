#pragma once
// Philox4x32-10: a counter-based generator. The value at (seed, stream, index) never depends on
// which thread asks or in what order, which is what makes training reproducible.
#include <array>
#include <cstdint>

namespace tandem {

class Philox {
 public:
  explicit Philox(uint64_t seed, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  // Four 32-bit words for counter block `block`.
  std::array<uint32_t, 4> block(uint64_t block) const;
  uint32_t bits(uint64_t index) const { return block(index / 4)[index % 4]; }
  // Uniform in [0, 1), 24 bits of mantissa.
  float uniform(uint64_t index) const { return static_cast<float>(bits(index) >> 8) * 0x1p-24f; }
  // Standard normal via Box-Muller from the two halves of one counter block.
  float normal(uint64_t index) const;
  // out[k] = uniform(first + k) for k < n, one counter block per four values.
  void uniforms(uint64_t first, int64_t n, float* out) const;
  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }

 private:
  uint64_t seed_;
  uint64_t stream_;
};

// Derives independent 64-bit keys for sub-streams (per layer, per step) from one seed.
uint64_t mix_seed(uint64_t seed, uint64_t salt);

}  // namespace tandem
