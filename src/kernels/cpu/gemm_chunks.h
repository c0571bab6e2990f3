#pragma once
// How gemm and gemm_bf16 cut C(M,N): along its longer side (rows, or columns in whole 32-float
// runs) into chunks fixed by the shape, run on the intra-op pool. Each chunk is one
// single-threaded product over its own part of C (no split of the K sum), so the bits are the
// same whatever the thread count.
#include <cstdint>

#include "core/parallel.h"

namespace tandem::kernels::cpu {

// fn(first_row, rows, first_column, columns) for each chunk of C.
template <class F>
void for_gemm_chunks(int64_t m, int64_t n, int64_t k, const F& fn) {
  double work = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  bool by_rows = m >= n;
  // Columns in chunks of at least 32: narrower ones starve oneDNN's kernel (C 32 × 64 over K =
  // 5,408, one core: 4 chunks of 16 columns 213 µs, 2 of 32 153 µs, 4 of 8 rows 146 µs).
  int64_t granule = by_rows ? 8 : 32;
  int64_t units = by_rows ? m : n;
  int64_t chunks = core::split_chunks(units, work, granule);
  core::parallel_for(chunks, work, [&](int64_t chunk) {
    auto [begin, end] = core::chunk_range(units, chunks, chunk, granule);
    if (begin == end) return;
    if (by_rows) fn(begin, end - begin, int64_t{0}, n);
    else fn(int64_t{0}, m, begin, end - begin);
  });
}

// The part of op(X) (stored `ld` apart, transposed or not) that starts at row `row`, column `col`.
template <class T>
const T* operand_at(const T* x, bool transposed, int64_t ld, int64_t row, int64_t col) {
  return transposed ? x + col * ld + row : x + row * ld + col;
}

}  // namespace tandem::kernels::cpu
