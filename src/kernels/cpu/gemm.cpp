// GEMM through oneDNN's sgemm, one OpenMP thread per call, in the chunks of gemm_chunks.h: the
// bits are the same whatever the thread count, and a busy machine costs a thread, not a time
// slice.
#include <dnnl.h>

#include "kernels/cpu/dnnl_check.h"
#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/gemm_chunks.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/signals_held.h"

namespace tandem::kernels::cpu {

void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  follow_isa_cap();
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  for_gemm_chunks(m, n, k, [&](int64_t row, int64_t rows, int64_t col, int64_t cols) {
    AsyncSignalsHeld held;  // see signals_held.h: the kernel moves the stack pointer into the heap
    DNNL_CHECK(dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', rows, cols, k, alpha,
                          operand_at(a, transpose_a, lda, row, 0), lda, operand_at(b, transpose_b, ldb, 0, col), ldb,
                          beta, c + row * ldc + col, ldc));
  });
}

}  // namespace tandem::kernels::cpu
