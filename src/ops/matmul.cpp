// matmul: a:(M,K) b:(K,N) -> (M,N), either stored transposed.
// backward: da = dy·bᵀ, db = aᵀ·dy (with the transposes folded into the gemm calls).
#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct MatmulNode : autograd::Node {
  Tensor a, b;
  bool ta, tb;
  void backward(GradientTape& tape, const Tensor& dy) override {
    Tensor g = dy.contiguous();
    int64_t m = g.dim(0), n = g.dim(1);
    int64_t k = ta ? a.dim(0) : a.dim(1);
    if (needs(0)) {
      Tensor da = Tensor::empty(a.shape(), DType::Float32, g.device());
      // ta: da(K,M) = b·dyᵀ ; else da(M,K) = dy·bᵀ
      if (ta)
        kernels::backend(g.device())
            .gemm(tb, true, k, m, n, 1.0f, b.buffer<float>(), b.dim(1), g.buffer<float>(), n, 0.0f, da.buffer<float>(),
                  m);
      else
        kernels::backend(g.device())
            .gemm(false, !tb, m, k, n, 1.0f, g.buffer<float>(), n, b.buffer<float>(), b.dim(1), 0.0f,
                  da.buffer<float>(), k);
      tape.accumulate(input_slots[0], da);
    }
    if (needs(1)) {
      Tensor db = Tensor::empty(b.shape(), DType::Float32, g.device());
      // tb: db(N,K) = dyᵀ·a ; else db(K,N) = aᵀ·dy
      if (tb)
        kernels::backend(g.device())
            .gemm(true, ta, n, k, m, 1.0f, g.buffer<float>(), n, a.buffer<float>(), a.dim(1), 0.0f, db.buffer<float>(),
                  k);
      else
        kernels::backend(g.device())
            .gemm(!ta, false, k, n, m, 1.0f, a.buffer<float>(), a.dim(1), g.buffer<float>(), n, 0.0f,
                  db.buffer<float>(), n);
      tape.accumulate(input_slots[1], db);
    }
  }
};

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b) {
  require_float(a_in, "matmul", "a");
  require_float(b_in, "matmul", "b");
  require_device(b_in, a_in, "matmul", "b");
  require_rank(a_in, 2, "matmul", "a");
  require_rank(b_in, 2, "matmul", "b");
  Tensor a = a_in.contiguous(), b = b_in.contiguous();
  int64_t m = transpose_a ? a.dim(1) : a.dim(0), k = transpose_a ? a.dim(0) : a.dim(1);
  int64_t kb = transpose_b ? b.dim(1) : b.dim(0), n = transpose_b ? b.dim(0) : b.dim(1);
  if (k != kb)
    fail("matmul: inner dimensions differ: a gives {} (shape {}), b gives {} (shape {})", k, a.shape().str(), kb,
         b.shape().str());
  Tensor y = Tensor::empty({m, n}, DType::Float32, a.device());
  kernels::backend(a.device())
      .gemm(transpose_a, transpose_b, m, n, k, 1.0f, a.buffer<float>(), a.dim(1), b.buffer<float>(), b.dim(1), 0.0f,
            y.buffer<float>(), n);
  if (auto* tape = autograd::tracking_tape({&a_in, &b_in})) {
    auto* node = new MatmulNode();
    node->a = a;
    node->b = b;
    node->ta = transpose_a;
    node->tb = transpose_b;
    autograd::record(tape, node, {&a_in, &b_in}, y);
  }
  return y;
}

}  // namespace tandem::ops
