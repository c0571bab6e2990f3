// Pooling, channels last. Max pooling is a loop of its own: each output value is the maximum of
// its window (padding excluded; the first in window order, row by row, where several are equal),
// and the workspace keeps the window index of that maximum (int32, one per output value) for
// backward, which adds each output gradient there in output order, both vectorized along the
// channels (the cnn at batch 64 on one thread: 13,507 samples/s with oneDNN's max pooling, 17,881
// with this; bench_models, 2026-11-26). Average pooling goes
// through oneDNN. As for convolutions, the batch is cut into chunks of whole images fixed by the
// shape, each on the intra-op pool; the workspace is laid out image by image.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "core/vectorize.h"
#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/kernels.h"
#include "kernels/elements.h"
#include "tandem/error.h"

namespace tandem::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

struct PoolPrimitives {
  Pool2dShape shape;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
  memory src_m, dst_m, workspace_m;
  size_t workspace_bytes = 0;
};

PoolPrimitives make_pool(const Pool2dShape& s) {
  auto& ctx = dnnl_context();
  PoolPrimitives p;
  p.shape = s;
  memory::desc src({s.n, s.c, s.h, s.w}, f32, tag::nhwc);
  memory::desc dst({s.n, s.c, s.oh, s.ow}, f32, tag::nhwc);
  auto algo = s.kind == PoolKind::Max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  memory::dims strides{s.sh, s.sw}, kernel{s.ph, s.pw}, pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
  dnnl::pooling_forward::desc fd(dnnl::prop_kind::forward_training, algo, src, dst, strides, kernel, pad_l, pad_r);
  dnnl::pooling_forward::primitive_desc fpd(fd, ctx.engine);
  p.forward = dnnl::pooling_forward(fpd);
  dnnl::pooling_backward::desc bd(algo, src, dst, strides, kernel, pad_l, pad_r);
  p.backward = dnnl::pooling_backward({bd, ctx.engine, fpd});
  p.src_m = memory(src, ctx.engine, nullptr);
  p.dst_m = memory(dst, ctx.engine, nullptr);
  p.workspace_bytes = s.kind == PoolKind::Max ? fpd.workspace_desc().get_size() : 0;
  if (p.workspace_bytes > 0) p.workspace_m = memory(fpd.workspace_desc(), ctx.engine, nullptr);
  return p;
}

PoolPrimitives& pool_primitives(const Pool2dShape& s) {
  thread_local std::vector<std::unique_ptr<PoolPrimitives>> cache;
  for (auto& entry : cache)
    if (entry->shape == s) return *entry;
  cache.push_back(std::make_unique<PoolPrimitives>(make_pool(s)));
  return *cache.back();
}

// y = max(y, x) along c channels, a = k where x is the larger.
TANDEM_VECTORIZE void fold_max_loop(const float* x, float* y, int32_t* a, int32_t k, int64_t c) {
  for (int64_t i = 0; i < c; ++i) {
    bool larger = x[i] > y[i];
    y[i] = larger ? x[i] : y[i];
    a[i] = larger ? k : a[i];
  }
}
void fold_max(const float* x, float* y, int32_t* a, int32_t k, int64_t c) {
  core::vectorized([&] { fold_max_loop(x, y, a, k, c); });
}

// 2 × 2 windows at stride 2, each inside the input (the default MaxPooling2D's): one output row
// of `count` positions from input rows x and x + w·c, each window in registers, stored once.
TANDEM_VECTORIZE void max_pool_2x2_row_loop(const float* x, int64_t w, int64_t c, int64_t count, float* __restrict y,
                                            int32_t* __restrict arg) {
  const float* below = x + w * c;
  for (int64_t o = 0; o < count; ++o) {
    const float* __restrict r0 = x + 2 * o * c, * __restrict r1 = below + 2 * o * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      float m = r0[ch];
      int32_t k = 0;
      float v = r0[c + ch];
      k = v > m ? 1 : k;
      m = v > m ? v : m;
      v = r1[ch];
      k = v > m ? 2 : k;
      m = v > m ? v : m;
      v = r1[c + ch];
      k = v > m ? 3 : k;
      m = v > m ? v : m;
      y[o * c + ch] = m;
      arg[o * c + ch] = k;
    }
  }
}
void max_pool_2x2_row(const float* x, int64_t w, int64_t c, int64_t count, float* __restrict y,
                      int32_t* __restrict arg) {
  core::vectorized([&] { max_pool_2x2_row_loop(x, w, c, count, y, arg); });
}

// Its backward where the windows tile the input: each input value written once, dy where its
// window's maximum was, else 0.
TANDEM_VECTORIZE void max_unpool_2x2_row_loop(const float* __restrict dy, const int32_t* __restrict arg, int64_t w,
                                              int64_t c, int64_t count, float* dx) {
  float* below = dx + w * c;
  for (int64_t o = 0; o < count; ++o) {
    float* __restrict r0 = dx + 2 * o * c, * __restrict r1 = below + 2 * o * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      float d = dy[o * c + ch];
      int32_t k = arg[o * c + ch];
      r0[ch] = k == 0 ? d : 0.0f;
      r0[c + ch] = k == 1 ? d : 0.0f;
      r1[ch] = k == 2 ? d : 0.0f;
      r1[c + ch] = k == 3 ? d : 0.0f;
    }
  }
}
void max_unpool_2x2_row(const float* __restrict dy, const int32_t* __restrict arg, int64_t w, int64_t c, int64_t count,
                        float* dx) {
  core::vectorized([&] { max_unpool_2x2_row_loop(dy, arg, w, c, count, dx); });
}

// The window's geometry as kernels/elements.h walks it.
elements::ConvGeometry window(const Pool2dShape& s) {
  return {s.h, s.w, s.c, s.ph, s.pw, s.sh, s.sw, s.pad_top, s.pad_left, s.oh, s.ow};
}

bool is_2x2_inside(const Pool2dShape& s) {
  return s.ph == 2 && s.pw == 2 && s.sh == 2 && s.sw == 2 && s.pad_top == 0 && s.pad_left == 0 && 2 * s.oh <= s.h &&
         2 * s.ow <= s.w;
}

void max_pool_image(const Pool2dShape& s, const float* x, float* y, int32_t* arg) {
  if (is_2x2_inside(s)) {
    for (int64_t oh = 0; oh < s.oh; ++oh)
      max_pool_2x2_row(x + 2 * oh * s.w * s.c, s.w, s.c, s.ow, y + oh * s.ow * s.c, arg + oh * s.ow * s.c);
    return;
  }
  elements::ConvGeometry g = window(s);
  for (int64_t oh = 0; oh < s.oh; ++oh)
    for (int64_t ow = 0; ow < s.ow; ++ow) {
      float* yo = y + (oh * s.ow + ow) * s.c;
      int32_t* ao = arg + (oh * s.ow + ow) * s.c;
      bool any = false;
      elements::window_places(g, oh, ow, [&](int64_t place, int64_t hi, int64_t wj) {
        const float* xi = x + (hi * s.w + wj) * s.c;
        auto k = static_cast<int32_t>(place);
        if (any) return fold_max(xi, yo, ao, k, s.c);
        std::copy(xi, xi + s.c, yo);
        std::fill(ao, ao + s.c, k);
        any = true;
      });
      if (!any) {  // a window in the padding alone
        std::fill(yo, yo + s.c, 0.0f);
        std::fill(ao, ao + s.c, -1);
      }
    }
}

// dx += dy along c channels where the window index of the maximum is k.
TANDEM_VECTORIZE void add_where_loop(const float* dy, const int32_t* a, int32_t k, float* dx, int64_t c) {
  for (int64_t i = 0; i < c; ++i) dx[i] += a[i] == k ? dy[i] : 0.0f;
}
void add_where(const float* dy, const int32_t* a, int32_t k, float* dx, int64_t c) {
  core::vectorized([&] { add_where_loop(dy, a, k, dx, c); });
}

// dx = dy along c channels where the window index of the maximum is k, else 0.
TANDEM_VECTORIZE void set_where_loop(const float* dy, const int32_t* a, int32_t k, float* dx, int64_t c) {
  for (int64_t i = 0; i < c; ++i) dx[i] = a[i] == k ? dy[i] : 0.0f;
}
void set_where(const float* dy, const int32_t* a, int32_t k, float* dx, int64_t c) {
  core::vectorized([&] { set_where_loop(dy, a, k, dx, c); });
}

// Each window position's channels in one pass (output order: overlapping windows add in it).
// Where the windows tile the input (each value in exactly one), each dx value is written once.
bool unpools_2x2(const Pool2dShape& s) { return is_2x2_inside(s) && 2 * s.oh == s.h && 2 * s.ow == s.w; }

void max_pool_image_backward(const Pool2dShape& s, const float* dy, const int32_t* arg, float* dx) {
  if (unpools_2x2(s)) {
    for (int64_t oh = 0; oh < s.oh; ++oh) {
      int64_t at = oh * s.ow * s.c;
      max_unpool_2x2_row(dy + at, arg + at, s.w, s.c, s.ow, dx + 2 * oh * s.w * s.c);
    }
    return;
  }
  bool tiles = s.sh == s.ph && s.sw == s.pw && s.oh * s.sh - s.pad_top >= s.h && s.ow * s.sw - s.pad_left >= s.w;
  auto* write = tiles ? set_where : add_where;
  if (!tiles) std::fill(dx, dx + s.h * s.w * s.c, 0.0f);
  elements::ConvGeometry g = window(s);
  for (int64_t oh = 0; oh < s.oh; ++oh)
    for (int64_t ow = 0; ow < s.ow; ++ow) {
      const float* d = dy + (oh * s.ow + ow) * s.c;
      const int32_t* a = arg + (oh * s.ow + ow) * s.c;
      elements::window_places(g, oh, ow, [&](int64_t place, int64_t hi, int64_t wj) {
        write(d, a, static_cast<int32_t>(place), dx + (hi * s.w + wj) * s.c, s.c);
      });
    }
}

// Runs fn(image) on every image, in chunks of whole images fixed by the shape.
template <class F>
void for_images(const Pool2dShape& s, const F& fn) {
  double work = 4.0 * static_cast<double>(s.n * s.oh * s.ow * s.c * s.ph * s.pw);  // a few operations a value
  int64_t chunks = core::split_chunks(s.n, work);
  core::parallel_for(chunks, work, [&](int64_t c) {
    core::Range r = core::chunk_range(s.n, chunks, c);
    for (int64_t i = r.begin; i < r.end; ++i) fn(i);
  });
}

Pool2dShape images(Pool2dShape s, int64_t n) {
  s.n = n;
  return s;
}

// Workspace bytes per image, from a one-image primitive.
size_t workspace_per_image(const Pool2dShape& s) { return pool_primitives(images(s, 1)).workspace_bytes; }

// Runs fn(primitives, first image, workspace offset) on each chunk of whole images.
template <class F>
void for_image_chunks(const Pool2dShape& s, const F& fn) {
  // In the chunk and thread thresholds' units (GEMM operations): oneDNN's AVX2 max pooling measured
  // ~3.5 ns per window element on one core, about what 32 GEMM operations take.
  double work = 32.0 * static_cast<double>(s.n * s.oh * s.ow * s.c * s.ph * s.pw);
  int64_t chunks = core::split_chunks(s.n, work);
  size_t per_image = chunks > 1 ? workspace_per_image(s) : 0;
  core::parallel_for(chunks, work, [&](int64_t c) {
    core::Range r = core::chunk_range(s.n, chunks, c);
    if (r.begin == r.end) return;
    PoolPrimitives& p = pool_primitives(images(s, r.end - r.begin));
    if (chunks > 1 && p.workspace_bytes != per_image * static_cast<size_t>(r.end - r.begin))
      fail("pooling: oneDNN's workspace for {} images is {} bytes, not {} per image", r.end - r.begin,
           p.workspace_bytes, per_image);
    fn(p, r.begin, per_image * static_cast<size_t>(r.begin));
  });
}

}  // namespace

// Max: the window index of each output value. Average: room for the whole batch's primitive and
// for its chunks' image-by-image parts (none, as oneDNN keeps no workspace for it).
size_t pool2d_workspace_bytes(const Pool2dShape& s) {
  if (s.kind == PoolKind::Max) return static_cast<size_t>(s.n * s.oh * s.ow * s.c) * sizeof(int32_t);
  return std::max(pool_primitives(s).workspace_bytes, workspace_per_image(s) * static_cast<size_t>(s.n));
}

void pool2d_forward(const Pool2dShape& s, const float* x, float* y, void* workspace) {
  if (s.kind == PoolKind::Max) {
    int64_t in = s.h * s.w * s.c, out = s.oh * s.ow * s.c;
    return for_images(
        s, [&](int64_t i) { max_pool_image(s, x + i * in, y + i * out, static_cast<int32_t*>(workspace) + i * out); });
  }
  for_image_chunks(s, [&](PoolPrimitives& p, int64_t first, size_t workspace_at) {
    const float* xs = x + first * s.h * s.w * s.c;
    float* ys = y + first * s.oh * s.ow * s.c;
    if (p.workspace_bytes > 0)
      dnnl_execute(p.forward, {{DNNL_ARG_SRC, &p.src_m, xs},
                               {DNNL_ARG_DST, &p.dst_m, ys},
                               {DNNL_ARG_WORKSPACE, &p.workspace_m, static_cast<char*>(workspace) + workspace_at}});
    else dnnl_execute(p.forward, {{DNNL_ARG_SRC, &p.src_m, xs}, {DNNL_ARG_DST, &p.dst_m, ys}});
  });
}

void pool2d_backward(const Pool2dShape& s, const float* dy, const void* workspace, float* dx) {
  if (s.kind == PoolKind::Max) {
    int64_t in = s.h * s.w * s.c, out = s.oh * s.ow * s.c;
    return for_images(s, [&](int64_t i) {
      max_pool_image_backward(s, dy + i * out, static_cast<const int32_t*>(workspace) + i * out, dx + i * in);
    });
  }
  for_image_chunks(s, [&](PoolPrimitives& p, int64_t first, size_t workspace_at) {
    const float* dys = dy + first * s.oh * s.ow * s.c;
    float* dxs = dx + first * s.h * s.w * s.c;
    if (p.workspace_bytes > 0)
      dnnl_execute(p.backward,
                   {{DNNL_ARG_DIFF_DST, &p.dst_m, dys},
                    {DNNL_ARG_DIFF_SRC, &p.src_m, dxs},
                    {DNNL_ARG_WORKSPACE, &p.workspace_m, static_cast<const char*>(workspace) + workspace_at}});
    else dnnl_execute(p.backward, {{DNNL_ARG_DIFF_DST, &p.dst_m, dys}, {DNNL_ARG_DIFF_SRC, &p.src_m, dxs}});
  });
}

namespace {
// m = dp where p > 0, else 0: ReLU's derivative, read from the pooled values.
TANDEM_VECTORIZE void where_positive_loop(const float* dp, const float* p, float* m, int64_t n) {
  for (int64_t i = 0; i < n; ++i) m[i] = p[i] > 0.0f ? dp[i] : 0.0f;
}
void where_positive(const float* dp, const float* p, float* m, int64_t n) {
  core::vectorized([&] { where_positive_loop(dp, p, m, n); });
}

}  // namespace

void conv2d_max_pool2d_forward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x, const float* kernel,
                               const float* bias, float* p, void* workspace) {
  int64_t in = pool.h * pool.w * pool.c, out = pool.oh * pool.ow * pool.c;
  auto* arg = static_cast<int32_t*>(workspace);
  conv2d_forward_chunks(conv, x, kernel, bias, [&](int64_t first, int64_t images, const float* y) {
    for (int64_t i = 0; i < images; ++i)
      max_pool_image(pool, y + i * in, p + (first + i) * out, arg + (first + i) * out);
  });
}

void conv2d_max_pool2d_backward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x, const float* kernel,
                                const float* p, const void* workspace, const float* dp, float* dx, float* dkernel,
                                float* dbias) {
  int64_t in = pool.h * pool.w * pool.c, out = pool.oh * pool.ow * pool.c;
  const auto* arg = static_cast<const int32_t*>(workspace);
  // ReLU's derivative on a chunk's pooled gradient, into a buffer of the chunk's thread.
  auto masked_chunk = [&](int64_t first, int64_t images) {
    thread_local std::vector<float> masked;
    masked.resize(static_cast<size_t>(images * out));
    where_positive(dp + first * out, p + first * out, masked.data(), images * out);
    return masked.data();
  };
  // A small convolution's weight gradients read that directly: no unpooled copy.
  if (dx == nullptr && conv2d_is_small(conv) && unpools_2x2(pool))
    return conv2d_small_weight_gradients(
        conv, x,
        [&](int64_t first, int64_t images) {
          return ConvOutputGradient{nullptr, masked_chunk(first, images), arg + first * out};
        },
        dkernel, dbias);
  auto fill_dy = [&](int64_t first, int64_t images, float* dy) {
    const float* masked = masked_chunk(first, images);
    for (int64_t i = 0; i < images; ++i)
      max_pool_image_backward(pool, masked + i * out, arg + (first + i) * out, dy + i * in);
  };
  conv2d_backward_chunks(conv, x, kernel, fill_dy, dx, dkernel, dbias);
}

}  // namespace tandem::kernels::cpu
