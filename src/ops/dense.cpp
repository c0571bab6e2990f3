// dense: x:(B,I) kernel:(I,U) bias:(U) -> y = act(x·kernel + bias):(B,U), one gemm and one fused pass.
// backward: dz = dy·act'(…) from y (and z for GELU); dx = dz·kernelᵀ; dkernel = xᵀ·dz; dbias = Σ_rows dz.
#include <algorithm>

#include "core/vectorize.h"
#include "ops/checks.h"

namespace tandem::ops {
namespace {

TANDEM_VECTORIZE void add_to_loop(float* out, const float* g, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] += g[i];
}
void add_to(float* out, const float* g, int64_t n) {
  core::vectorized([&] { add_to_loop(out, g, n); });
}

struct DenseNode : autograd::Node {
  Tensor x, kernel, y, z;  // z: pre-activation, kept only when the derivative needs it
  Tensor x16, kernel16;    // with bf16 products: x and the kernel as forward rounded them, for backward's
  Activation act;
  bool bf16;                          // the products in bf16, as forward's
  bool row_exact;                     // float32 products of row-exact bits (RowExactProducts), as forward's
  DeferredKernelGradients* deferred;  // forward's: where the kernel's gradient may go instead
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t b = x.dim(0), in = kernel.dim(0), units = kernel.dim(1);
    kernels::Backend& backend = kernels::backend(dy.device());
    Tensor dz = dy;
    if (act != Activation::Linear) {
      dz = Tensor::empty(dy.shape(), DType::Float32, dy.device());
      backend.activation_backward(dy.buffer<float>(), z.defined() ? z.buffer<float>() : nullptr, y.buffer<float>(),
                                  dz.buffer<float>(), b, units, act);
    }
    bool defers = needs(1) && deferred != nullptr && deferred->defers(kernel);
    // dz rounded once for both products (each would round it alike).
    Tensor dz16 = x16.defined() && (needs(0) || (needs(1) && !defers)) ? rounded_bf16(dz, b, units) : Tensor();
    // C = op(A)·op(B), on the operands forward rounded where it did, else as they are.
    auto multiply = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a, const Tensor& a16,
                        int64_t lda, const Tensor& bm, const Tensor& b16, int64_t ldb, Tensor& c) {
      if (row_exact && !ta)  // each row its own bits
        backend.gemm_ordered(tb, m, n, k, a.buffer<float>(), lda, bm.buffer<float>(), ldb, c.buffer<float>(), n);
      else if (dz16.defined())
        backend.gemm_bf16_rounded(ta, tb, m, n, k, bf16_data(a16), bf16_data(b16), c.buffer<float>(), n);
      else
        product(bf16, dy.device(), ta, tb, m, n, k, a.buffer<float>(), lda, bm.buffer<float>(), ldb, c.buffer<float>(),
                n);
    };
    if (needs(0)) {
      Tensor dx = Tensor::empty(x.shape(), DType::Float32, dy.device());
      multiply(false, true, b, in, units, dz, dz16, units, kernel, kernel16, units, dx);
      tape.accumulate(input_slots[0], dx);
    }
    if (defers) {
      deferred->add(kernel, x, dz, bf16);
    } else if (needs(1)) {
      Tensor dk = Tensor::empty(kernel.shape(), DType::Float32, dy.device());
      multiply(true, false, in, units, b, x, x16, in, dz, dz16, units, dk);
      tape.accumulate(input_slots[1], dk);
    }
    if (needs(2) && !(defers && deferred->defers_bias(kernel))) {
      Tensor db = Tensor::empty({units}, DType::Float32, dy.device());
      kernels::backend(dy.device()).column_sums(dz.buffer<float>(), b, units, db.buffer<float>());
      tape.accumulate(input_slots[2], db);
    }
  }
};

}  // namespace

DeferredKernelGradients::Kept* DeferredKernelGradients::find(const Tensor& kernel) {
  for (Kept& k : kept_)
    if (k.kernel.id() == kernel.id()) return &k;
  return nullptr;
}

bool DeferredKernelGradients::takes(Device device) { return device.kind == Device::Kind::CPU; }

void DeferredKernelGradients::defer(const Tensor& kernel, bool with_bias) {
  if (Kept* k = find(kernel)) k->with_bias = k->with_bias || with_bias;
  else kept_.push_back({kernel, {}, {}, false, with_bias});
}

bool DeferredKernelGradients::defers(const Tensor& kernel) const {
  return std::any_of(kept_.begin(), kept_.end(), [&](const Kept& k) { return k.kernel.id() == kernel.id(); });
}

bool DeferredKernelGradients::defers_bias(const Tensor& kernel) const {
  return std::any_of(kept_.begin(), kept_.end(),
                     [&](const Kept& k) { return k.kernel.id() == kernel.id() && k.with_bias; });
}

void DeferredKernelGradients::add(const Tensor& kernel, const Tensor& x, const Tensor& dz, bool bf16) {
  Kept* k = find(kernel);
  if (k == nullptr) fail("DeferredKernelGradients: kernel {} was not deferred", kernel.shape().str());
  k->bf16 = bf16;
  k->xs.push_back(x);
  k->dzs.push_back(dz);
}

Tensor DeferredKernelGradients::gradient(const Tensor& kernel) {
  Kept* k = find(kernel);
  if (k == nullptr) fail("DeferredKernelGradients: kernel {} was not deferred", kernel.shape().str());
  int64_t in = kernel.dim(0), units = kernel.dim(1), rows = 0;
  for (const Tensor& x : k->xs) rows += x.dim(0);
  Tensor dk = rows > 0 ? Tensor::empty(kernel.shape(), DType::Float32, kernel.device())
                       : Tensor::zeros(kernel.shape(), DType::Float32, kernel.device());
  if (rows > 0) {
    auto stacked = [&](const std::vector<Tensor>& parts, int64_t width) {
      if (parts.size() == 1) return parts[0];
      Tensor all = Tensor::empty({rows, width}, DType::Float32, kernel.device());
      int64_t at = 0;
      for (const Tensor& p : parts) {
        all.slice(at, at + p.dim(0)).copy_from(p);
        at += p.dim(0);
      }
      return all;
    };
    Tensor x = stacked(k->xs, in), dz = stacked(k->dzs, units);
    product(k->bf16, kernel.device(), true, false, in, units, rows, x.buffer<float>(), in, dz.buffer<float>(), units,
            dk.buffer<float>(), units);
  }
  k->xs.clear();
  k->dzs.clear();
  return dk;
}

KernelProducts DeferredKernelGradients::take(const Tensor& kernel) {
  Kept* k = find(kernel);
  if (k == nullptr) fail("DeferredKernelGradients: kernel {} was not deferred", kernel.shape().str());
  KernelProducts taken{std::move(k->xs), std::move(k->dzs), k->bf16};
  k->xs.clear();
  k->dzs.clear();
  return taken;
}

KernelProducts KernelProducts::rows(int64_t begin, int64_t end) const {
  KernelProducts part{{}, {}, bf16};
  for (size_t j = 0; j < xs.size(); ++j) {
    part.xs.push_back(xs[j].slice(begin, end));
    part.dzs.push_back(dzs[j].slice(begin, end));
  }
  return part;
}

Tensor KernelProducts::bias_gradient(int64_t units, Device device) const {
  if (dzs.empty()) return Tensor::zeros({units}, DType::Float32, device);
  Tensor sum = Tensor::empty({units}, DType::Float32, device);
  Tensor call = dzs.size() > 1 ? Tensor::empty({units}, DType::Float32, device) : Tensor();
  for (size_t j = 0; j < dzs.size(); ++j) {
    const Tensor& dz = dzs[j];
    if (dz.dim(1) != units) fail("KernelProducts: dz has {} columns, the bias {}", dz.dim(1), units);
    kernels::backend(device).column_sums(dz.buffer<float>(), dz.dim(0), units, (j == 0 ? sum : call).buffer<float>());
    if (j > 0) add_to(sum.buffer<float>(), call.buffer<float>(), units);
  }
  return sum;
}

int64_t kernel_tile_rows(int64_t in, int64_t units) {
  // About 64 KB of gradient a tile, in whole runs of 30 rows (the ordered product's blocks of 5 and
  // of 6 rows): it stays in cache while the parts' products are added into it.
  constexpr int64_t kTileFloats = 16384, kRun = 30;
  int64_t rows = std::max<int64_t>(kRun, kTileFloats / std::max<int64_t>(units, 1) / kRun * kRun);
  return std::min(rows, std::max<int64_t>(in, 1));
}

void kernel_products_tile(const KernelProducts& p, int64_t row, int64_t rows, int64_t units, bool add, float* out,
                          float* scratch) {
  int64_t n = rows * units;
  if (p.xs.empty()) {
    if (!add) std::fill_n(out, n, 0.0f);
    return;
  }
  if (!p.bf16 && p.xs.size() == 1) {  // the usual case: the product added to out in registers
    const Tensor& x = p.xs[0];
    kernels::backend(x.device())
        .gemm_tn_ordered(rows, units, x.dim(0), x.buffer<float>() + row, x.dim(1), p.dzs[0].buffer<float>(), units, add,
                         out, units);
    return;
  }
  float* part = add ? scratch : out;  // the part's sum, then added to out
  for (size_t j = 0; j < p.xs.size(); ++j) {
    const Tensor& x = p.xs[j];
    int64_t in = x.dim(1);
    float* c = j == 0 ? part : scratch + n;
    if (x.dim(0) == 0) std::fill_n(c, n, 0.0f);
    else
      product(p.bf16, x.device(), true, false, rows, units, x.dim(0), x.buffer<float>() + row, in,
              p.dzs[j].buffer<float>(), units, c, units);
    if (j > 0) add_to(part, c, n);
  }
  if (add) add_to(out, part, n);
}

Tensor dense(const Tensor& x_in, const Tensor& kernel, const Tensor& bias, Activation act,
             DeferredKernelGradients* deferred) {
  require_float(x_in, "dense", "x");
  require_float(kernel, "dense", "kernel");
  require_device(kernel, x_in, "dense", "kernel");
  require_device(bias, x_in, "dense", "bias");
  require_rank(x_in, 2, "dense", "x");
  require_rank(kernel, 2, "dense", "kernel");
  if (x_in.dim(1) != kernel.dim(0))
    fail("dense: x has {} features, kernel expects {} (x {}, kernel {})", x_in.dim(1), kernel.dim(0),
         x_in.shape().str(), kernel.shape().str());
  if (bias.defined()) {
    require_float(bias, "dense", "bias");
    if (bias.rank() != 1 || bias.dim(0) != kernel.dim(1))
      fail("dense: bias has shape {}, expected ({},)", bias.shape().str(), kernel.dim(1));
  }
  // Softmax stays a node of its own so that a cross-entropy loss can take the logits from it.
  if (act == Activation::Softmax) return activation(dense(x_in, kernel, bias, Activation::Linear, deferred), act);
  Tensor x = x_in.contiguous();
  int64_t b = x.dim(0), in = kernel.dim(0), units = kernel.dim(1);
  Tensor y = Tensor::empty({b, units}, DType::Float32, x.device());
  bool bf16 = products_in_bf16(x.device());
  GradientTape* tape = autograd::tracking_tape({&x_in, &kernel, &bias});
  // Under a tape, x and the kernel rounded once, for forward's product and backward's.
  Tensor x16, kernel16;
  if (bf16 && tape && b > 0 && in > 0 && units > 0) {
    x16 = rounded_bf16(x, b, in);
    kernel16 = rounded_bf16(kernel, in, units);
    kernels::backend(x.device())
        .gemm_bf16_rounded(false, false, b, units, in, bf16_data(x16), bf16_data(kernel16), y.buffer<float>(), units);
  } else if (!bf16 && row_exact_products()) {
    kernels::backend(x.device())
        .gemm_ordered(false, b, units, in, x.buffer<float>(), in, kernel.buffer<float>(), units, y.buffer<float>(),
                      units);
  } else {
    product(bf16, x.device(), false, false, b, units, in, x.buffer<float>(), in, kernel.buffer<float>(), units,
            y.buffer<float>(), units);
  }
  const float* bias_data = bias.defined() ? bias.buffer<float>() : nullptr;
  Tensor z;
  if (tape && kernels::activation_backward_needs_input(act)) {
    kernels::backend(x.device()).bias_activation(y.buffer<float>(), bias_data, b, units, Activation::Linear);
    z = y.clone();
    bias_data = nullptr;
  }
  kernels::backend(x.device()).bias_activation(y.buffer<float>(), bias_data, b, units, act);
  if (tape) {
    auto* node = new DenseNode();
    node->x = x;
    node->kernel = kernel;
    node->y = y;
    node->z = z;
    node->x16 = x16;
    node->kernel16 = kernel16;
    node->act = act;
    node->bf16 = bf16;
    node->row_exact = !bf16 && row_exact_products();
    node->deferred = deferred;
    autograd::record(tape, node, {&x_in, &kernel, &bias}, y);
  }
  return y;
}

}  // namespace tandem::ops
