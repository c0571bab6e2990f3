// gemm_tn_ordered: C (+)= Aᵀ·B, and gemm_ordered: C = A·op(B), with each element one FMA chain
// over k in order, so that its bits depend on nothing but its own k values: not on m, n, the block
// it falls in, or the host's vector width. Deterministic training sums kernel gradients with the
// first (xᵀ·dz over a micro-batch of a few dozen rows, added straight into the running sum while
// in registers) and runs a replica's micro-batches as one batch through dense layers with the
// second (each output row's bits its own, whatever rows come with it).
#include <immintrin.h>

#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {

// Taken by value: an accumulator whose address is taken is kept in memory, stored every iteration.
__attribute__((target("avx512f"))) inline void store(float* at, __m512 acc, bool add, __mmask16 m) {
  _mm512_mask_storeu_ps(at, m, add ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, at), acc) : acc);
}

// Rows [i0, i0 + R) × columns [j0, j0 + 16·V) (the last vector `last` lanes wide) of C. Six rows
// of four vectors keep 24 accumulators in registers: per k, 6 broadcasts and 4 loads feed 24 FMAs.
template <int R, int V>
__attribute__((target("avx512f,fma"))) void block_avx512(int64_t i0, int64_t j0, int64_t k, const float* a, int64_t lda,
                                                         const float* b, int64_t ldb, bool add, float* c, int64_t ldc,
                                                         __mmask16 last) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* brow = b + kk * ldb + j0;
    const float* arow = a + kk * lda + i0;
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      bv[v] = v + 1 < V ? _mm512_loadu_ps(brow + 16 * v) : _mm512_maskz_loadu_ps(last, brow + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(arow[r]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      store(c + (i0 + r) * ldc + j0 + 16 * v, acc[r][v], add, v + 1 < V ? __mmask16(0xFFFF) : last);
}

template <int R>
__attribute__((target("avx512f,fma"))) void rows_avx512(int64_t i0, int64_t n, int64_t k, const float* a, int64_t lda,
                                                        const float* b, int64_t ldb, bool add, float* c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    int64_t width = std::min<int64_t>(64, n - j0), vectors = (width + 15) / 16, tail = width - 16 * (vectors - 1);
    auto last = static_cast<__mmask16>(tail == 16 ? 0xFFFFu : (1u << tail) - 1u);
    switch (vectors) {
      case 4: block_avx512<R, 4>(i0, j0, k, a, lda, b, ldb, add, c, ldc, last); break;
      case 3: block_avx512<R, 3>(i0, j0, k, a, lda, b, ldb, add, c, ldc, last); break;
      case 2: block_avx512<R, 2>(i0, j0, k, a, lda, b, ldb, add, c, ldc, last); break;
      default: block_avx512<R, 1>(i0, j0, k, a, lda, b, ldb, add, c, ldc, last); break;
    }
  }
}

using RowsKernel = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, bool, float*,
                            int64_t);
constexpr int64_t kRows = 6;  // rows of C a block keeps in registers
// By the number of rows a block has (the last block of C may have fewer).
constexpr RowsKernel kRowsAvx512[kRows + 1] = {nullptr,        rows_avx512<1>, rows_avx512<2>, rows_avx512<3>,
                                               rows_avx512<4>, rows_avx512<5>, rows_avx512<6>};

// The same sums without AVX-512: std::fma is the one rounding vfmadd makes, so the bits match.
void rows_scalar(int64_t i0, int64_t rows, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, bool add, float* c, int64_t ldc) {
  for (int64_t i = i0; i < i0 + rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) acc = std::fma(a[kk * lda + i], b[kk * ldb + j], acc);
      c[i * ldc + j] = add ? c[i * ldc + j] + acc : acc;
    }
}

// C = A·B: rows [i0, i0 + R) × columns [j0, j0 + 16·V) (the last vector `last` lanes wide), over
// k in [k0, k1): the chain goes on from C's value where k0 > 0 (a float stored and loaded back is
// the same float, so cutting k into blocks that stay in cache changes no bit).
template <int R, int V>
__attribute__((target("avx512f,fma"))) void nn_block_avx512(int64_t i0, int64_t j0, int64_t k0, int64_t k1,
                                                            const float* a, int64_t lda, const float* b, int64_t ldb,
                                                            float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[r][v] = k0 == 0
                      ? _mm512_setzero_ps()
                      : _mm512_maskz_loadu_ps(v + 1 < V ? __mmask16(0xFFFF) : last, c + (i0 + r) * ldc + j0 + 16 * v);
  const float* arow = a + i0 * lda;
  for (int64_t kk = k0; kk < k1; ++kk) {
    const float* brow = b + kk * ldb + j0;
    __m512 bv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      bv[v] = v + 1 < V ? _mm512_loadu_ps(brow + 16 * v) : _mm512_maskz_loadu_ps(last, brow + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(arow[r * lda + kk]);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      _mm512_mask_storeu_ps(c + (i0 + r) * ldc + j0 + 16 * v, v + 1 < V ? __mmask16(0xFFFF) : last, acc[r][v]);
}

using NnBlock = void (*)(int64_t, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                         int64_t, __mmask16);
template <int V>
constexpr int kNnRows = V == 5 ? 5 : 6;  // rows a block of V vectors keeps: 25 or at most 24 accumulators
template <int V, int... R>
constexpr std::array<NnBlock, 7> nn_rows(std::integer_sequence<int, R...>) {
  return {nullptr, nn_block_avx512<(R + 1 <= kNnRows<V> ? R + 1 : 1), V>...};
}
// [V][rows]: the block of V vectors and `rows` rows (1 to kNnRows<V>).
constexpr std::array<std::array<NnBlock, 7>, 6> kNnBlocks = {std::array<NnBlock, 7>{},
                                                             nn_rows<1>(std::make_integer_sequence<int, 6>{}),
                                                             nn_rows<2>(std::make_integer_sequence<int, 6>{}),
                                                             nn_rows<3>(std::make_integer_sequence<int, 6>{}),
                                                             nn_rows<4>(std::make_integer_sequence<int, 6>{}),
                                                             nn_rows<5>(std::make_integer_sequence<int, 6>{})};

// C's columns in blocks of at most 5 vectors, as even as can be (160 columns: 5 + 5 vectors).
struct ColumnBlock {
  int64_t j0;
  int vectors;
  __mmask16 last;
};
std::vector<ColumnBlock> column_blocks(int64_t n) {
  int64_t vectors = (n + 15) / 16, count = (vectors + 4) / 5;
  std::vector<ColumnBlock> blocks;
  int64_t j0 = 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t v = vectors / count + (i < vectors % count ? 1 : 0), width = std::min<int64_t>(16 * v, n - j0);
    int64_t tail = width - 16 * (v - 1);
    blocks.push_back({j0, static_cast<int>(v), static_cast<__mmask16>(tail == 16 ? 0xFFFFu : (1u << tail) - 1u)});
    j0 += width;
  }
  return blocks;
}

void nn_scalar(int64_t i0, int64_t rows, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
               float* c, int64_t ldc) {
  for (int64_t i = i0; i < i0 + rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) acc = std::fma(a[i * lda + kk], b[kk * ldb + j], acc);
      c[i * ldc + j] = acc;
    }
}

}  // namespace

void gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                     bool add, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  bool avx512 = ordered_products_vectorised();
  double work = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  int64_t blocks = (m + kRows - 1) / kRows;
  int64_t chunks = core::split_chunks(blocks, work, 1);
  core::parallel_for(chunks, work, [&](int64_t chunk) {
    auto [first, end] = core::chunk_range(blocks, chunks, chunk, 1);
    for (int64_t blk = first; blk < end; ++blk) {
      int64_t i0 = blk * kRows, rows = std::min(kRows, m - i0);
      if (avx512) kRowsAvx512[rows](i0, n, k, a, lda, b, ldb, add, c, ldc);
      else rows_scalar(i0, rows, n, k, a, lda, b, ldb, add, c, ldc);  // the same bits
    }
  });
}

bool ordered_products_vectorised() {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return avx512;
}

// out (cols × rows, rows apart) = mᵀ for m (rows × cols, ld apart): 16 × 16 blocks transposed in
// registers (two rounds of unpacks, then 128-bit lanes), the edges one element at a time.
static __attribute__((target("avx512f"))) void transpose_avx512(const float* m, int64_t rows, int64_t cols, int64_t ld,
                                                                float* out) {
  int64_t r0 = 0;
  for (; r0 + 16 <= rows; r0 += 16) {
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16) {
      __m512 r[16], t[16], u[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(m + (r0 + i) * ld + c0);
      for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      // u[4i + q], 128-bit lane L: rows 4i to 4i + 3 of column 4L + q.
      for (int i = 0; i < 4; ++i) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
      }
      for (int q = 0; q < 4; ++q) {
        __m512 x0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44), x1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xEE);
        __m512 y0 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44),
               y1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xEE);
        _mm512_storeu_ps(out + (c0 + q) * rows + r0, _mm512_shuffle_f32x4(x0, y0, 0x88));
        _mm512_storeu_ps(out + (c0 + 4 + q) * rows + r0, _mm512_shuffle_f32x4(x0, y0, 0xDD));
        _mm512_storeu_ps(out + (c0 + 8 + q) * rows + r0, _mm512_shuffle_f32x4(x1, y1, 0x88));
        _mm512_storeu_ps(out + (c0 + 12 + q) * rows + r0, _mm512_shuffle_f32x4(x1, y1, 0xDD));
      }
    }
    for (int64_t i = r0; i < r0 + 16; ++i)
      for (int64_t j = c0; j < cols; ++j) out[j * rows + i] = m[i * ld + j];
  }
  for (int64_t i = r0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = m[i * ld + j];
}

void transpose(const float* m, int64_t rows, int64_t cols, int64_t ld, float* out) {
  if (ordered_products_vectorised()) return transpose_avx512(m, rows, cols, ld, out);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = m[i * ld + j];
}

void gemm_ordered(bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (transpose_b && k > 0) {  // B (n × k) laid out as k × n once, in this thread's buffer
    thread_local std::vector<float> laid_out;
    laid_out.resize(static_cast<size_t>(n * k));
    transpose(b, n, k, ldb, laid_out.data());
    b = laid_out.data();
    ldb = n;
  }
  double work = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  constexpr int64_t kRowGroup = 30;  // rows a chunk takes at least: whole blocks of 5 and of 6 rows
  int64_t groups = (m + kRowGroup - 1) / kRowGroup;
  int64_t chunks = core::split_chunks(groups, work, 1);
  if (!ordered_products_vectorised()) {
    core::parallel_for(chunks, work, [&](int64_t chunk) {
      auto [first, end] = core::chunk_range(groups, chunks, chunk, 1);
      int64_t i0 = first * kRowGroup, i1 = std::min(m, end * kRowGroup);
      nn_scalar(i0, i1 - i0, n, k, a, lda, b, ldb, c, ldc);  // the same bits
    });
    return;
  }
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  // B's rows in blocks whose columns of a block stay in the first-level cache while every row of
  // the chunk passes over them.
  constexpr int64_t kDepth = 64;
  std::vector<ColumnBlock> blocks = column_blocks(n);
  core::parallel_for(chunks, work, [&](int64_t chunk) {
    auto [first, end] = core::chunk_range(groups, chunks, chunk, 1);
    int64_t i_begin = first * kRowGroup, i_end = std::min(m, end * kRowGroup);
    for (const ColumnBlock& col : blocks) {
      int64_t rows_per_block = col.vectors == 5 ? 5 : 6;
      for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
        int64_t k1 = std::min(k, k0 + kDepth);
        for (int64_t i0 = i_begin; i0 < i_end; i0 += rows_per_block) {
          int64_t rows = std::min(rows_per_block, i_end - i0);
          kNnBlocks[static_cast<size_t>(col.vectors)][static_cast<size_t>(rows)](i0, col.j0, k0, k1, a, lda, b, ldb, c,
                                                                                 ldc, col.last);
        }
      }
    }
  });
}

}  // namespace tandem::kernels::cpu
