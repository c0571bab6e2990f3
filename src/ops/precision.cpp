// The thread's compute precision (PrecisionScope in tandem/ops.h).
#include "ops/checks.h"

namespace tandem::ops {
namespace {
thread_local Precision current = Precision::Float32;
thread_local bool row_exact = false;
}  // namespace

RowExactProducts::RowExactProducts() : previous_(row_exact) { row_exact = true; }
RowExactProducts::~RowExactProducts() { row_exact = previous_; }
bool row_exact_products() { return row_exact; }
bool has_fast_row_exact_products(Device device) { return kernels::backend(device).ordered_products_vectorised(); }

PrecisionScope::PrecisionScope(Precision precision) : previous_(current) { current = precision; }
PrecisionScope::~PrecisionScope() { current = previous_; }
Precision compute_precision() { return current; }

bool has_bf16_products(Device device) { return kernels::backend(device).has_bf16_products(); }

bool products_in_bf16(Device device) {
  return current == Precision::MixedBFloat16 && kernels::backend(device).has_bf16_products();
}

void product(bool bf16, Device device, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
             const float* b, int64_t ldb, float* c, int64_t ldc) {
  kernels::Backend& kernels = kernels::backend(device);
  if (bf16) kernels.gemm_bf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  else kernels.gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

Tensor rounded_bf16(const Tensor& t, int64_t rows, int64_t cols) {
  Tensor r = Tensor::empty({2 * rows * cols}, DType::UInt8, t.device());
  kernels::backend(t.device())
      .round_bf16(t.buffer<float>(), cols, rows, cols, reinterpret_cast<uint16_t*>(r.buffer<uint8_t>()));
  return r;
}

}  // namespace tandem::ops
