#pragma once
// exp that the compiler can vectorize (glibc's expf is a scalar call): Cephes' range reduction
// and polynomial, accurate to about 2 ulp over the float range. Its multiply-adds are written out
// (std::fma), so that it gives the same bits in a vector lane and in a loop's scalar tail whatever
// the compiler would fuse (its files are compiled with -ffp-contract=off).
#include <bit>
#include <cmath>
#include <cstdint>

namespace tandem::kernels::cpu {

inline float vexp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  float n = std::floor(std::fma(x, 1.44269504088896341f, 0.5f));
  float r = std::fma(n, 2.12194440e-4f, std::fma(-n, 0.693359375f, x));
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  float y = std::fma(p * r, r, r) + 1.0f;
  int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return y * std::bit_cast<float>(e);
}

}  // namespace tandem::kernels::cpu
