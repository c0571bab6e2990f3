// GEMM with bf16 products (mixed precision): op(A) and op(B) are rounded to bf16 (to nearest,
// ties to even), multiplied by oneDNN's matmul (AMX or AVX512_BF16 where the CPU has them) with
// float32 accumulation, and C stays float32. The operands are rounded once per call, in chunks on
// the intra-op pool; C is cut as gemm cuts it (gemm_chunks.h), each chunk a single-threaded
// matmul: the bits do not depend on the thread count. Primitives are cached per thread, keyed by
// the chunk's shape.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/gemm_chunks.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {

using dnnl::memory;
using dt = memory::data_type;

void round_portable(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    y[i] = static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded);  // a NaN stays a (quiet) NaN
  }
}

// The CPU's own rounding (VCVTNE2PS2BF16: to nearest even, NaNs quiet; it reads subnormal inputs as
// zeros), 32 values per instruction.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_avx512(const float* x, uint16_t* y,
                                                                                  int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(y + i, reinterpret_cast<__m512i&>(r));
  }
  if (i < n) {
    auto tail = static_cast<__mmask16>((1u << std::min<int64_t>(n - i, 16)) - 1);
    __m256bh low = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail, x + i));
    _mm256_mask_storeu_epi16(y + i, tail, reinterpret_cast<__m256i&>(low));
    if (n - i > 16) {
      auto high_mask = static_cast<__mmask16>((1u << (n - i - 16)) - 1);
      __m256bh high = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(high_mask, x + i + 16));
      _mm256_mask_storeu_epi16(y + i + 16, high_mask, reinterpret_cast<__m256i&>(high));
    }
  }
}

bool cpu_rounds_bf16() {
  static const bool has = core::isa() == core::Isa::Avx512 && __builtin_cpu_supports("avx512bf16");
  return has;
}

void round_span(const float* x, uint16_t* y, int64_t n) {
  if (cpu_rounds_bf16()) round_avx512(x, y, n);
  else round_portable(x, y, n);
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
  follow_isa_cap();
  static const bool native = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16;
  return native;
}

void round_to_bf16(const float* x, uint16_t* y, int64_t n) { round_span(x, y, n); }

void gemm_bf16(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // The operands packed as stored (A: m × k, or k × m transposed; B: k × n, or n × k).
  thread_local std::vector<uint16_t> packed;
  packed.resize(static_cast<size_t>(m * k + k * n));
  uint16_t* a16 = packed.data();
  uint16_t* b16 = a16 + m * k;
  round_matrix(a, lda, transpose_a ? k : m, transpose_a ? m : k, a16);
  round_matrix(b, ldb, transpose_b ? n : k, transpose_b ? k : n, b16);
  gemm_bf16_rounded(transpose_a, transpose_b, m, n, k, alpha, a16, b16, beta, c, ldc);
}

void round_matrix_to_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y) {
  round_matrix(x, ld, rows, cols, y);
}

void gemm_bf16_rounded(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a16, const uint16_t* b16, float beta, float* c, int64_t ldc) {
  int64_t a_cols = transpose_a ? m : k, b_cols = transpose_b ? k : n;
  for_gemm_chunks(m, n, k, [&](int64_t row, int64_t rows, int64_t col, int64_t cols) {
    Matmul& mm = matmul_for({rows, cols, k, transpose_a, transpose_b, a_cols, b_cols, ldc, alpha, beta});
    dnnl_execute(mm.primitive, {{DNNL_ARG_SRC, &mm.a, operand_at(a16, transpose_a, a_cols, row, 0)},
                                {DNNL_ARG_WEIGHTS, &mm.b, operand_at(b16, transpose_b, b_cols, 0, col)},
                                {DNNL_ARG_DST, &mm.c, c + row * ldc + col}});
  });
}

}  // namespace tandem::kernels::cpu
