// GEMM with bf16 products (mixed precision): op(A) and op(B) are rounded to bf16 (to nearest,
// ties to even), multiplied by oneDNN's matmul (AMX or AVX512_BF16 where the CPU has them) with
// float32 accumulation, and C stays float32. The operands are rounded once per call, in chunks on
// the intra-op pool; C is cut as gemm cuts it (rows or 16-column lines, fixed by the shape), each
// chunk a single-threaded matmul: the bits do not depend on the thread count. Primitives are
// cached per thread, keyed by the chunk's shape.
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "core/parallel.h"
#include "core/vectorize.h"
#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {

using dnnl::memory;
using dt = memory::data_type;

TANDEM_VECTORIZE void round_span(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    y[i] = static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded);  // a NaN stays a (quiet) NaN
  }
}

// rows × cols of x (row stride ld) into y, packed (row stride cols), in chunks of rows.
void round_matrix(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y) {
  double work = static_cast<double>(rows) * static_cast<double>(cols) * 0.25;  // a few operations per value
  int64_t chunks = core::split_chunks(rows, work);
  core::parallel_for(chunks, work, [&](int64_t c) {
    auto [begin, end] = core::chunk_range(rows, chunks, c);
    if (ld == cols) return round_span(x + begin * ld, y + begin * cols, (end - begin) * cols);
    for (int64_t r = begin; r < end; ++r) round_span(x + r * ld, y + r * cols, cols);
  });
}

struct MatmulKey {
  int64_t rows, cols, k;
  bool ta, tb;
  int64_t lda, ldb, ldc;
  float alpha, beta;
  bool operator==(const MatmulKey&) const = default;
};

struct Matmul {
  MatmulKey key;
  dnnl::matmul primitive;
  memory a, b, c;
};

Matmul& matmul_for(const MatmulKey& key) {
  thread_local std::vector<std::unique_ptr<Matmul>> cache;
  for (auto& m : cache)
    if (m->key == key) return *m;
  auto& ctx = dnnl_context();
  // op(A) is rows × k: stored k × rows when transposed; op(B) k × cols likewise.
  memory::desc a({key.rows, key.k}, dt::bf16, key.ta ? memory::dims{1, key.lda} : memory::dims{key.lda, 1});
  memory::desc b({key.k, key.cols}, dt::bf16, key.tb ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1});
  memory::desc c({key.rows, key.cols}, dt::f32, memory::dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  auto m = std::make_unique<Matmul>();
  m->key = key;
  m->primitive = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, ctx.engine));
  m->a = memory(a, ctx.engine, nullptr);
  m->b = memory(b, ctx.engine, nullptr);
  m->c = memory(c, ctx.engine, nullptr);
  cache.push_back(std::move(m));
  return *cache.back();
}

}  // namespace

bool bf16_products_native() {
  static const bool native = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16;
  return native;
}

void round_to_bf16(const float* x, uint16_t* y, int64_t n) { round_matrix(x, n, 1, n, y); }

void gemm_bf16(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // The operands packed as stored (A: m × k, or k × m transposed; B: k × n, or n × k).
  thread_local std::vector<uint16_t> packed;
  packed.resize(static_cast<size_t>(m * k + k * n));
  uint16_t* a16 = packed.data();
  uint16_t* b16 = a16 + m * k;
  int64_t a_cols = transpose_a ? m : k, b_cols = transpose_b ? k : n;
  round_matrix(a, lda, transpose_a ? k : m, a_cols, a16);
  round_matrix(b, ldb, transpose_b ? n : k, b_cols, b16);

  double work = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  bool by_rows = m >= n;
  int64_t granule = by_rows ? 8 : 16;
  int64_t units = by_rows ? m : n;
  int64_t chunks = core::split_chunks(units, work, granule);
  core::parallel_for(chunks, work, [&](int64_t chunk) {
    auto [begin, end] = core::chunk_range(units, chunks, chunk, granule);
    if (begin == end) return;
    const uint16_t* a_part = a16;
    const uint16_t* b_part = b16;
    float* c_part;
    int64_t rows = m, cols = n;
    if (by_rows) {
      a_part = transpose_a ? a16 + begin : a16 + begin * a_cols;
      c_part = c + begin * ldc;
      rows = end - begin;
    } else {
      b_part = transpose_b ? b16 + begin * b_cols : b16 + begin;
      c_part = c + begin;
      cols = end - begin;
    }
    Matmul& mm = matmul_for({rows, cols, k, transpose_a, transpose_b, a_cols, b_cols, ldc, alpha, beta});
    dnnl_execute(mm.primitive,
                 {{DNNL_ARG_SRC, &mm.a, a_part}, {DNNL_ARG_WEIGHTS, &mm.b, b_part}, {DNNL_ARG_DST, &mm.c, c_part}});
  });
}

}  // namespace tandem::kernels::cpu
