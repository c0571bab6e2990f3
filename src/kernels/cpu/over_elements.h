#pragma once
// over_elements: an elementwise kernel's loop cut into chunks of whole cache lines, run on the op's
// intra-op threads at the vector level core::isa() names. Each element is computed alone (the
// files that use it are built with -ffp-contract=off), so the bits do not depend on the cut.
#include <cstdint>

#include "core/parallel.h"
#include "core/vectorize.h"

namespace tandem::kernels::cpu {

// Runs loop(begin, count) over [0, n) in parts of whole cache lines, on the op's intra-op threads
// when the arrays are large enough to pay for the hand-off. Each element is updated alone, so the
// bits do not depend on how it is cut. `bytes` is what one element reads and writes: the work
// counted per byte, as the update runs at memory speed (a 28-byte Adam element ~0.4 ns on one
// core, as long as ~30 multiply-adds of a product). The cnn's Adam (347,146 parameters) took 14% of
// a 2-thread step on one thread.
template <class Loop>
void over_elements(int64_t n, int bytes, const Loop& loop) {
  constexpr int64_t kLine = 16;  // floats in a 64-byte cache line: no two threads write one line
  double work = static_cast<double>(n) * bytes;
  int64_t chunks = core::split_chunks(n, work, kLine);
  core::parallel_for(chunks, work, [&](int64_t c) {
    core::Range r = core::chunk_range(n, chunks, c, kLine);
    if (r.end > r.begin) core::vectorized([&] { loop(r.begin, r.end - r.begin); });
  });
}

}  // namespace tandem::kernels::cpu
