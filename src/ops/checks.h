#pragma once
// Argument checks shared by the ops; each failure names the op, the argument, and both values.
#include "autograd/node.h"
#include "kernels/backend.h"
#include "tandem/ops.h"

namespace tandem::ops {

inline void require_float(const Tensor& t, const char* op, const char* arg) {
  if (!t.defined()) fail("{}: argument '{}' is undefined", op, arg);
  if (t.dtype() != DType::Float32) fail("{}: argument '{}' must be float32, got {}", op, arg, dtype_name(t.dtype()));
}

// Every argument of an op lives on the first one's device, whose kernels it runs.
inline void require_device(const Tensor& t, const Tensor& first, const char* op, const char* arg) {
  if (t.defined() && t.device() != first.device())
    fail("{}: argument '{}' is on {}, the op runs on {}", op, arg, t.device().name(), first.device().name());
}

inline void require_rank(const Tensor& t, int rank, const char* op, const char* arg) {
  if (t.rank() != rank) fail("{}: argument '{}' must have rank {}, got shape {}", op, arg, rank, t.shape().str());
}

// Whether an op's products on `device` are bf16 now (the thread's precision, the device's support).
bool products_in_bf16(Device device);
// C = op(A)·op(B) on `device`, in bf16 products (gemm_bf16) or float32 (gemm).
void product(bool bf16, Device device, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
             const float* b, int64_t ldb, float* c, int64_t ldc);

// t (rows × cols, contiguous float32) rounded to bf16 on its device, for products that share an
// operand (Backend::gemm_bf16_rounded): a UInt8 tensor of 2·rows·cols bytes.
Tensor rounded_bf16(const Tensor& t, int64_t rows, int64_t cols);
inline const uint16_t* bf16_data(const Tensor& rounded) {
  return reinterpret_cast<const uint16_t*>(rounded.buffer<uint8_t>());
}

inline void require_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (!(a.shape() == b.shape())) fail("{}: shapes differ: {} vs {}", op, a.shape().str(), b.shape().str());
}

}  // namespace tandem::ops
