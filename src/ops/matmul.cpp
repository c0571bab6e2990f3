// matmul: a:(M,K) b:(K,N) -> (M,N), either stored transposed.
// backward: da = dy·bᵀ, db = aᵀ·dy (with the transposes folded into the gemm calls).
#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct MatmulNode : autograd::Node {
  Tensor a, b;
  bool ta, tb;
  bool bf16;  // the products in bf16, as forward's
  void backward(GradientTape& tape, const Tensor& dy) override {
    Tensor g = dy.contiguous();
    int64_t m = g.dim(0), n = g.dim(1);
    int64_t k = ta ? a.dim(0) : a.dim(1);
    if (needs(0)) {
      Tensor da = Tensor::empty(a.shape(), DType::Float32, g.device());
      // ta: da(K,M) = b·dyᵀ ; else da(M,K) = dy·bᵀ
      if (ta)
        product(bf16, g.device(), tb, true, k, m, n, b.buffer<float>(), b.dim(1), g.buffer<float>(), n,
                da.buffer<float>(), m);
      else
        product(bf16, g.device(), false, !tb, m, k, n, g.buffer<float>(), n, b.buffer<float>(), b.dim(1),
                da.buffer<float>(), k);
      tape.accumulate(input_slots[0], da);
    }
    if (needs(1)) {
      Tensor db = Tensor::empty(b.shape(), DType::Float32, g.device());
      // tb: db(N,K) = dyᵀ·a ; else db(K,N) = aᵀ·dy
      if (tb)
        product(bf16, g.device(), true, ta, n, k, m, g.buffer<float>(), n, a.buffer<float>(), a.dim(1),
                db.buffer<float>(), k);
      else
        product(bf16, g.device(), !ta, false, k, n, m, a.buffer<float>(), a.dim(1), g.buffer<float>(), n,
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
  bool bf16 = products_in_bf16(a.device());
  product(bf16, a.device(), transpose_a, transpose_b, m, n, k, a.buffer<float>(), a.dim(1), b.buffer<float>(), b.dim(1),
          y.buffer<float>(), n);
  if (auto* tape = autograd::tracking_tape({&a_in, &b_in})) {
    auto* node = new MatmulNode();
    node->a = a;
    node->b = b;
    node->ta = transpose_a;
    node->tb = transpose_b;
    node->bf16 = bf16;
    autograd::record(tape, node, {&a_in, &b_in}, y);
  }
  return y;
}

}  // namespace tandem::ops
