// GEMM through oneDNN's sgemm, one OpenMP thread per call. The output is cut along its longer
// side (rows of C, or columns in whole 16-float lines) into chunks fixed by the shape, each a
// single-threaded sgemm over its own part of C, run on the intra-op pool: the bits are the same
// whatever the thread count (no split of the K sum), and a busy machine costs a thread, not a
// time slice.
#include <dnnl.h>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_check.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/signals_held.h"

namespace tandem::kernels::cpu {

void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  double work = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  bool by_rows = m >= n;
  int64_t granule = by_rows ? 8 : 16;
  int64_t units = by_rows ? m : n;
  int64_t chunks = core::split_chunks(units, work, granule);
  core::parallel_for(chunks, work, [&](int64_t chunk) {
    auto [begin, end] = core::chunk_range(units, chunks, chunk, granule);
    if (begin == end) return;
    const float* a_part = a;
    const float* b_part = b;
    float* c_part;
    int64_t rows = m, cols = n;
    if (by_rows) {  // rows [begin, end) of op(A) and C
      a_part = transpose_a ? a + begin : a + begin * lda;
      c_part = c + begin * ldc;
      rows = end - begin;
    } else {  // columns [begin, end) of op(B) and C
      b_part = transpose_b ? b + begin * ldb : b + begin;
      c_part = c + begin;
      cols = end - begin;
    }
    AsyncSignalsHeld held;  // see signals_held.h: the kernel moves the stack pointer into the heap
    DNNL_CHECK(dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', rows, cols, k, alpha, a_part, lda, b_part,
                          ldb, beta, c_part, ldc));
  });
}

}  // namespace tandem::kernels::cpu
