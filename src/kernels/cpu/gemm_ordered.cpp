// gemm_tn_ordered: C (+)= Aᵀ·B, and gemm_ordered: C = A·op(B), with each element one FMA chain
// over k in order, so that its bits depend on nothing but its own k values: not on m, n, the block
// it falls in, or the host's vector width. Deterministic training sums kernel gradients with the
// first (xᵀ·dz over a micro-batch of a few dozen rows, added straight into the running sum while
// in registers) and runs a replica's micro-batches as one batch through dense layers with the
// second (each output row's bits its own, whatever rows come with it).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "core/isa.h"
#include "core/parallel.h"
#include "kernels/cpu/kernels.h"
#include "tandem/error.h"

namespace tandem::kernels::cpu {
namespace {

// Rows [i0, i0 + R) × columns [j0, j0 + 16·V) of C (the last vector `tail` lanes wide), the chains
// over k in [k0, k1). A is m × k (rows lda apart), or stored transposed (k × m) where kTransposedA.
// Each chain starts from zero, or where `resume` from C's value (a float stored and loaded back is
// the same float, so cutting k into blocks that stay in cache changes no bit); it is then stored,
// or added to C where `add`. Five rows of five vectors keep 25 accumulators in registers (six of
// four, 24): per k, 5 broadcasts and 5 loads feed 25 FMAs.
template <bool kTransposedA, int R, int V>
__attribute__((target("avx512f,fma"))) void block_avx512(int64_t i0, int64_t j0, int64_t k0, int64_t k1, const float* a,
                                                         int64_t lda, const float* b, int64_t ldb, bool resume,
                                                         bool add, float* c, int64_t ldc, int tail) {
  const auto last = static_cast<__mmask16>((1u << tail) - 1u);
  auto mask = [&](int v) { return v + 1 < V ? __mmask16(0xFFFF) : last; };
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[r][v] = resume ? _mm512_maskz_loadu_ps(mask(v), c + (i0 + r) * ldc + j0 + 16 * v) : _mm512_setzero_ps();
  for (int64_t kk = k0; kk < k1; ++kk) {
    // A transposed: this block reads a few floats of each of k rows far apart, which the hardware
    // does not fetch ahead (each is on another page); the blocks to come read on along the rows.
    if (kTransposedA) _mm_prefetch(reinterpret_cast<const char*>(a + kk * lda + i0 + 32), _MM_HINT_T0);
    const float* brow = b + kk * ldb + j0;
    __m512 bv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      bv[v] = v + 1 < V ? _mm512_loadu_ps(brow + 16 * v) : _mm512_maskz_loadu_ps(last, brow + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(kTransposedA ? a[kk * lda + i0 + r] : a[(i0 + r) * lda + kk]);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      float* at = c + (i0 + r) * ldc + j0 + 16 * v;
      _mm512_mask_storeu_ps(at, mask(v),
                            add ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask(v), at), acc[r][v]) : acc[r][v]);
    }
}

// The same block with AVX2's 8-float registers: three rows of four vectors keep 12 accumulators
// (per k, 3 broadcasts and 4 loads feed 12 FMAs). Measured on the mlp5's shapes, one core of an
// AMD EPYC (Zen 4), GFLOP/s: 3 × 4 104–110, 5 × 2 87–102, 6 × 2 86–91, 4 × 3 84–95, 4 × 2 89–102.
// The chains are the AVX-512 block's, so the bits are too. `tail`: the lanes of the
// last vector that are columns of C; with kFull (tail 8) every vector is whole. A partial vector is
// loaded under a mask but stored through a buffer a lane at a time: AMD's cores run vmaskmovps to
// memory as microcode, some dozens of cycles each (a store per accumulator would cost as much as
// the FMAs of a micro-batch's rows).
template <bool kTransposedA, int R, int V, bool kFull>
__attribute__((target("avx2,fma"))) void block_avx2(int64_t i0, int64_t j0, int64_t k0, int64_t k1, const float* a,
                                                    int64_t lda, const float* b, int64_t ldb, bool resume, bool add,
                                                    float* c, int64_t ldc, int tail) {
  const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#define TANDEM_LOAD_LANES(p, v) (kFull || (v) + 1 < V ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, last))
  __m256 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[r][v] = resume ? TANDEM_LOAD_LANES(c + (i0 + r) * ldc + j0 + 8 * v, v) : _mm256_setzero_ps();
  for (int64_t kk = k0; kk < k1; ++kk) {
    if (kTransposedA) _mm_prefetch(reinterpret_cast<const char*>(a + kk * lda + i0 + 32), _MM_HINT_T0);
    const float* brow = b + kk * ldb + j0;
    __m256 bv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) bv[v] = TANDEM_LOAD_LANES(brow + 8 * v, v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 av = _mm256_broadcast_ss(kTransposedA ? a + kk * lda + i0 + r : a + (i0 + r) * lda + kk);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      float* at = c + (i0 + r) * ldc + j0 + 8 * v;
      __m256 value = add ? _mm256_add_ps(TANDEM_LOAD_LANES(at, v), acc[r][v]) : acc[r][v];
      if (kFull || v + 1 < V) {
        _mm256_storeu_ps(at, value);
      } else {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, value);
        for (int l = 0; l < tail; ++l) at[l] = lanes[l];
      }
    }
#undef TANDEM_LOAD_LANES
}

using Block = void (*)(int64_t, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, bool, bool,
                       float*, int64_t, int);
constexpr int64_t rows_per_block_avx512(int vectors) { return vectors == 5 ? 5 : 6; }
template <bool kTransposedA, int V, int... R>
constexpr std::array<Block, 7> avx512_blocks_of(std::integer_sequence<int, R...>) {
  return {nullptr, block_avx512<kTransposedA, (R + 1 <= rows_per_block_avx512(V) ? R + 1 : 1), V>...};
}
// [V][rows]: the block of V vectors and `rows` rows (1 to rows_per_block(V)).
template <bool kTransposedA>
constexpr std::array<std::array<Block, 7>, 6> kAvx512Blocks = {
    std::array<Block, 7>{},
    avx512_blocks_of<kTransposedA, 1>(std::make_integer_sequence<int, 6>{}),
    avx512_blocks_of<kTransposedA, 2>(std::make_integer_sequence<int, 6>{}),
    avx512_blocks_of<kTransposedA, 3>(std::make_integer_sequence<int, 6>{}),
    avx512_blocks_of<kTransposedA, 4>(std::make_integer_sequence<int, 6>{}),
    avx512_blocks_of<kTransposedA, 5>(std::make_integer_sequence<int, 6>{})};
// AVX2's blocks: kAvx2Rows rows of up to kAvx2Vectors vectors; [whole][V][rows] (rows 1 to
// kAvx2Rows), `whole` where the last vector is too. (160 columns: 5 blocks of 4 vectors.)
constexpr int kAvx2Rows = 3, kAvx2Vectors = 4;
template <bool kTransposedA, bool kFull, int V, int... R>
constexpr std::array<Block, 7> avx2_row_blocks(std::integer_sequence<int, R...>) {
  return {nullptr, block_avx2<kTransposedA, (R + 1 <= kAvx2Rows ? R + 1 : 1), V, kFull>...};
}
template <bool kTransposedA, bool kFull, int... V>
constexpr std::array<std::array<Block, 7>, kAvx2Vectors + 1> avx2_blocks(std::integer_sequence<int, V...>) {
  return {std::array<Block, 7>{}, avx2_row_blocks<kTransposedA, kFull, V + 1>(std::make_integer_sequence<int, 6>{})...};
}
template <bool kTransposedA>
constexpr std::array<std::array<std::array<Block, 7>, kAvx2Vectors + 1>, 2> kAvx2Blocks = {
    avx2_blocks<kTransposedA, false>(std::make_integer_sequence<int, kAvx2Vectors>{}),
    avx2_blocks<kTransposedA, true>(std::make_integer_sequence<int, kAvx2Vectors>{})};

// C's columns in blocks of at most `most` vectors of `width` floats, as even as can be (160 columns
// in AVX-512's: 5 + 5 vectors; in AVX2's: 5 blocks of 4): block i of column_block_count(n).
struct ColumnBlock {
  int64_t j0;
  int vectors;
  int tail;  // lanes of the last vector that are columns of C (1 to width)
};
int64_t column_block_count(int64_t n, int64_t width, int64_t most) {
  return ((n + width - 1) / width + most - 1) / most;
}
ColumnBlock column_block(int64_t n, int64_t i, int64_t width, int64_t most) {
  int64_t vectors = (n + width - 1) / width, count = column_block_count(n, width, most), rest = vectors % count;
  int64_t v = vectors / count + (i < rest ? 1 : 0), j0 = width * (i * (vectors / count) + std::min(i, rest));
  int64_t tail = std::min<int64_t>(width * v, n - j0) - width * (v - 1);
  return {j0, static_cast<int>(v), static_cast<int>(tail)};
}

// The same sums without vectors (plain x86-64): std::fma is the one rounding vfmadd makes, so the
// bits match.
template <bool kTransposedA>
void rows_scalar(int64_t i0, int64_t i1, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                 bool add, float* c, int64_t ldc) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk)
        acc = std::fma(kTransposedA ? a[kk * lda + i] : a[i * lda + kk], b[kk * ldb + j], acc);
      c[i * ldc + j] = add ? c[i * ldc + j] + acc : acc;
    }
}

// Rows [i_begin, i_end) of C (+)= op(A)·B in blocks of `Width`-float vectors, k in blocks of `depth`.
template <bool kTransposedA, int64_t Width, int64_t MostVectors, class Table>
void blocks(const Table& table, int64_t i_begin, int64_t i_end, int64_t n, int64_t k, const float* a, int64_t lda,
            const float* b, int64_t ldb, bool add, float* c, int64_t ldc, int64_t depth) {
  for (int64_t blk = 0; blk < column_block_count(n, Width, MostVectors); ++blk) {
    ColumnBlock col = column_block(n, blk, Width, MostVectors);
    int64_t step = Width == 16 ? rows_per_block_avx512(col.vectors) : kAvx2Rows;
    const auto& row_blocks = [&]() -> const auto& {
      if constexpr (Width == 16) return table[static_cast<size_t>(col.vectors)];
      else return table[col.tail == Width][static_cast<size_t>(col.vectors)];
    }
    ();
    for (int64_t k0 = 0; k0 < std::max<int64_t>(k, 1); k0 += depth) {
      int64_t k1 = std::min(k, k0 + depth);
      for (int64_t i0 = i_begin; i0 < i_end; i0 += step) {
        auto rows = static_cast<size_t>(std::min(step, i_end - i0));
        row_blocks[rows](i0, col.j0, k0, k1, a, lda, b, ldb, k0 > 0, add, c, ldc, col.tail);
      }
    }
  }
}

// C (+)= op(A)·B over the intra-op pool, in chunks of whole groups of rows, at vector level
// `level`. `depth`: k is cut into blocks of it (not where `add`: the chain must be whole before it
// is added to C).
template <bool kTransposedA>
void ordered(core::Isa level, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
             bool add, float* c, int64_t ldc, int64_t depth) {
  if (level > core::host_isa())
    fail("ordered products: vector level {} asked for, this CPU has {}", core::isa_name(level),
         core::isa_name(core::host_isa()));
  if (m <= 0 || n <= 0) return;
  double work = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  constexpr int64_t kRowGroup = 30;  // rows a chunk takes at least: whole blocks of 3, 5 and 6 rows
  int64_t groups = (m + kRowGroup - 1) / kRowGroup;
  int64_t chunks = core::split_chunks(groups, work, 1);
  if (add || k <= 0) depth = std::max<int64_t>(k, 1);
  core::parallel_for(chunks, work, [&](int64_t chunk) {
    auto [first, end] = core::chunk_range(groups, chunks, chunk, 1);
    int64_t i_begin = first * kRowGroup, i_end = std::min(m, end * kRowGroup);
    switch (level) {
      case core::Isa::Avx512:
        return blocks<kTransposedA, 16, 5>(kAvx512Blocks<kTransposedA>, i_begin, i_end, n, k, a, lda, b, ldb, add, c,
                                           ldc, depth);
      case core::Isa::Avx2:
        return blocks<kTransposedA, 8, kAvx2Vectors>(kAvx2Blocks<kTransposedA>, i_begin, i_end, n, k, a, lda, b, ldb,
                                                     add, c, ldc, depth);
      case core::Isa::X86_64: return rows_scalar<kTransposedA>(i_begin, i_end, n, k, a, lda, b, ldb, add, c, ldc);
    }
  });
}

// What a transpose in whole `block` × `block` blocks leaves (block 0: everything), one element at
// a time: the columns past the last whole block of each blocked row, then the rows past them.
void transpose_edges(const float* m, int64_t rows, int64_t cols, int64_t ld, float* out, int64_t block) {
  int64_t whole_rows = block > 0 ? rows / block * block : 0, whole_cols = block > 0 ? cols / block * block : 0;
  for (int64_t i = 0; i < whole_rows; ++i)
    for (int64_t j = whole_cols; j < cols; ++j) out[j * rows + i] = m[i * ld + j];
  for (int64_t i = whole_rows; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = m[i * ld + j];
}

// out (cols × rows, rows apart) = mᵀ for m (rows × cols, ld apart) in whole 16 × 16 blocks
// transposed in registers (two rounds of unpacks, then 128-bit lanes; transpose_edges does the
// rest). (GCC 12 warns of the unpacks' own undefined pass-through operand, which they never read.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void transpose_avx512(const float* m, int64_t rows, int64_t cols, int64_t ld,
                                                         float* out) {
  for (int64_t r0 = 0; r0 + 16 <= rows; r0 += 16) {
    for (int64_t c0 = 0; c0 + 16 <= cols; c0 += 16) {
      __m512 r[16], t[16], u[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(m + (r0 + i) * ld + c0);
      for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      // u[4i + q], 128-bit lane L: rows 4i to 4i + 3 of column 4L + q.
      for (int i = 0; i < 4; ++i) {
        __m512d p = _mm512_castps_pd(t[4 * i]), q = _mm512_castps_pd(t[4 * i + 1]);
        __m512d s = _mm512_castps_pd(t[4 * i + 2]), w = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(p, s));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p, s));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(q, w));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(q, w));
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
  }
}
#pragma GCC diagnostic pop

// The same with AVX2 in whole 8 × 8 blocks (unpacks, then 64-bit shuffles, then 128-bit lanes).
__attribute__((target("avx2"))) void transpose_avx2(const float* m, int64_t rows, int64_t cols, int64_t ld,
                                                    float* out) {
  for (int64_t r0 = 0; r0 + 8 <= rows; r0 += 8) {
    for (int64_t c0 = 0; c0 + 8 <= cols; c0 += 8) {
      __m256 r[8], t[8], u[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(m + (r0 + i) * ld + c0);
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      // u[4i + q], 128-bit lane L: rows 4i to 4i + 3 of column 4L + q.
      for (int i = 0; i < 2; ++i) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
      }
      for (int q = 0; q < 4; ++q) {
        _mm256_storeu_ps(out + (c0 + q) * rows + r0, _mm256_permute2f128_ps(u[q], u[4 + q], 0x20));
        _mm256_storeu_ps(out + (c0 + 4 + q) * rows + r0, _mm256_permute2f128_ps(u[q], u[4 + q], 0x31));
      }
    }
  }
}

}  // namespace

bool ordered_products_vectorised() { return core::isa() >= core::Isa::Avx2; }

void transpose(const float* m, int64_t rows, int64_t cols, int64_t ld, float* out) {
  switch (core::isa()) {
    case core::Isa::Avx512:
      transpose_avx512(m, rows, cols, ld, out);
      return transpose_edges(m, rows, cols, ld, out, 16);
    case core::Isa::Avx2: transpose_avx2(m, rows, cols, ld, out); return transpose_edges(m, rows, cols, ld, out, 8);
    case core::Isa::X86_64: return transpose_edges(m, rows, cols, ld, out, 0);
  }
}

void gemm_tn_ordered_at(core::Isa level, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                        int64_t ldb, bool add, float* c, int64_t ldc) {
  ordered<true>(level, m, n, k, a, lda, b, ldb, add, c, ldc, k);
}

void gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                     bool add, float* c, int64_t ldc) {
  gemm_tn_ordered_at(core::isa(), m, n, k, a, lda, b, ldb, add, c, ldc);
}

void gemm_ordered_at(core::Isa level, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (transpose_b && k > 0) {  // B (n × k) laid out as k × n once, in this thread's buffer
    // On a 64-byte boundary: the blocks' loads of B rows would otherwise each span two cache lines
    // (a 160 × 160 product: 48 µs instead of 39).
    thread_local std::vector<float> laid_out;
    laid_out.resize(static_cast<size_t>(n * k) + 15);
    float* at = laid_out.data() + (-(reinterpret_cast<uintptr_t>(laid_out.data()) / sizeof(float)) & 15);
    transpose(b, n, k, ldb, at);
    b = at;
    ldb = n;
  }
  // k in blocks of 64: a block's rows of B, for a block of C's columns, stay in the first-level
  // cache while every row of the chunk passes over them.
  ordered<false>(level, m, n, k, a, lda, b, ldb, false, c, ldc, 64);
}

void gemm_ordered(bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc) {
  gemm_ordered_at(core::isa(), transpose_b, m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace tandem::kernels::cpu
