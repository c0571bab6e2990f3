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

inline void require_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (!(a.shape() == b.shape())) fail("{}: shapes differ: {} vs {}", op, a.shape().str(), b.shape().str());
}

}  // namespace tandem::ops
