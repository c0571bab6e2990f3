#pragma once
// A hot loop written once and run at the vector level core::isa() names (TANDEM_MAX_ISA caps it):
// the loop is a function marked TANDEM_VECTORIZE, called inside core::vectorized's lambda, which
// runs the lambda inlined into a copy compiled for x86-64-v4 (AVX-512), one for -v3 (AVX2 + FMA),
// or the plain caller. The dispatch is Tandem's own, not the loader's (GCC's target_clones pick a
// clone from the CPU alone, before main, so no cap could lower them).
//
// Both vector levels have FMA at every width (and scalar): a fused multiply-add written out
// (std::fma) stays one instruction in a vector lane and in the loop's tail alike, so an
// element-wise loop gives the same bits at both levels; plain x86-64 calls the library's fmaf.
#include <type_traits>

#include "core/isa.h"

// Always inlined: into whichever copy of core::vectorized's lambda calls it. Called anywhere else,
// it compiles for plain x86-64.
#define TANDEM_VECTORIZE inline __attribute__((always_inline))

// The instruction sets of x86-64-v4 and -v3 as target attributes. Not "arch=": a function of
// another arch may not be inlined into these (GCC 12), only one with fewer instructions. 512-bit
// vectors at v4, as GCC's arch=x86-64-v4 chooses.
#define TANDEM_TARGET_V3 "avx2,fma,bmi,bmi2,lzcnt,movbe,f16c,popcnt,sse4.2"
#define TANDEM_TARGET_V4 TANDEM_TARGET_V3 ",avx512f,avx512cd,avx512vl,avx512bw,avx512dq,prefer-vector-width=512"

namespace tandem::core {

// The level a copy is compiled for, handed to a lambda that takes it (one that picks a vector
// width or a blocking per level with `if constexpr`).
template <Isa L>
struct AtIsa {
  static constexpr Isa level = L;
};

namespace detail {
template <Isa L, class F>
auto call_at(F& f) {
  if constexpr (std::is_invocable_v<F&, AtIsa<L>>) return f(AtIsa<L>{});
  else return f();
}
template <class F>
__attribute__((target(TANDEM_TARGET_V4), flatten)) auto run_v4(F& f) {
  return call_at<Isa::Avx512>(f);
}
template <class F>
__attribute__((target(TANDEM_TARGET_V3), flatten)) auto run_v3(F& f) {
  return call_at<Isa::Avx2>(f);
}
}  // namespace detail

// f() (or f(AtIsa<level>{})) at the level isa() names; returns what f returns.
template <class F>
auto vectorized(F&& f) {
  switch (isa()) {
    case Isa::Avx512: return detail::run_v4(f);
    case Isa::Avx2: return detail::run_v3(f);
    default: return detail::call_at<Isa::X86_64>(f);
  }
}

}  // namespace tandem::core
