// 2-D convolution through oneDNN, channels last (NHWC) with Keras' HWIO kernels. oneDNN picks
// the weights layout its fastest kernels want ("any"); the kernel is reordered to it and the
// weight gradient back from it, which costs little next to a plain-layout fallback.
// The batch is cut into chunks of whole images fixed by the shape (core::split_chunks), each a
// single-threaded primitive run on the intra-op pool; the weight gradient is each chunk's own,
// summed in chunk order, so the bits do not depend on the thread count. Primitives are cached
// per thread, keyed by the chunk's shape. With bf16 products (Conv2dShape::bf16) the primitives
// take x, dy and the kernel as bf16 (the kernel rounded by its reorder, x and dy by each chunk into
// a buffer of its thread) and give float32. A convolution over few input values per window
// (conv2d_is_small: a first layer over images) runs Tandem's own loops (conv2d_small.cpp) instead
// of the forward and backward-weights primitives, in the same chunks.
#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;
constexpr auto bf16 = memory::data_type::bf16;

// A reorder between Keras' HWIO kernel and the layout a primitive chose, with its buffer.
struct WeightsLayout {
  bool needed = false;
  dnnl::reorder reorder;
  memory from, to;
  std::vector<float> buffer;
  uint64_t filled_for = 0;  // the call whose kernel the buffer holds: a thread's chunks reorder it once
  void init(const memory::desc& plain, const memory::desc& chosen, bool to_chosen, const dnnl::engine& engine) {
    needed = !(plain == chosen);
    if (!needed) return;
    buffer.resize((chosen.get_size() + sizeof(float) - 1) / sizeof(float));
    const memory::desc& src = to_chosen ? plain : chosen;
    const memory::desc& dst = to_chosen ? chosen : plain;
    from = memory(src, engine, nullptr);
    to = memory(dst, engine, nullptr);
    reorder = dnnl::reorder(from, to);
  }
};

struct ConvPrimitives {
  Conv2dShape shape;
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
  WeightsLayout forward_weights, backward_data_weights, weight_gradient;
  memory src_m, bias_m, dst_m, fwd_weights_m, bwd_data_weights_m, bwd_weights_m;
  memory src_in_m, dst_in_m;                           // x and dy as the primitives read them (bf16 with bf16 products)
  std::vector<float> zero_bias, unused_bias_gradient;  // for layers without a bias
};

void make_conv(ConvPrimitives& p, const Conv2dShape& s) {
  auto& ctx = dnnl_context();
  p.shape = s;
  auto in = s.bf16 ? bf16 : f32;  // what the products read
  memory::desc src({s.n, s.c, s.h, s.w}, f32, tag::nhwc), src_in({s.n, s.c, s.h, s.w}, in, tag::nhwc);
  memory::desc hwio({s.f, s.c, s.kh, s.kw}, f32, tag::hwio);
  memory::desc any_weights({s.f, s.c, s.kh, s.kw}, in, tag::any), any_gradient({s.f, s.c, s.kh, s.kw}, f32, tag::any);
  memory::desc bias({s.f}, f32, tag::x);
  memory::desc dst({s.n, s.f, s.oh, s.ow}, f32, tag::nhwc), dst_in({s.n, s.f, s.oh, s.ow}, in, tag::nhwc);
  memory::dims strides{s.sh, s.sw}, pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
  auto algo = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr;
  if (s.fused_relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  dnnl::convolution_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, algo, src_in, any_weights, bias, dst, strides, pad_l, pad_r}, attr,
      ctx.engine);
  dnnl::convolution_backward_data::primitive_desc bdpd({algo, src, any_weights, dst_in, strides, pad_l, pad_r},
                                                       ctx.engine, fpd);
  dnnl::convolution_backward_weights::primitive_desc bwpd(
      {algo, src_in, any_gradient, bias, dst_in, strides, pad_l, pad_r}, ctx.engine, fpd);
  p.forward = dnnl::convolution_forward(fpd);
  p.backward_data = dnnl::convolution_backward_data(bdpd);
  p.backward_weights = dnnl::convolution_backward_weights(bwpd);
  p.forward_weights.init(hwio, fpd.weights_desc(), true, ctx.engine);
  p.backward_data_weights.init(hwio, bdpd.weights_desc(), true, ctx.engine);
  p.weight_gradient.init(hwio, bwpd.diff_weights_desc(), false, ctx.engine);
  p.zero_bias.assign(static_cast<size_t>(s.f), 0.0f);
  p.unused_bias_gradient.resize(static_cast<size_t>(s.f));
  p.src_m = memory(src, ctx.engine, nullptr);
  p.src_in_m = memory(src_in, ctx.engine, nullptr);
  p.dst_in_m = memory(dst_in, ctx.engine, nullptr);
  p.bias_m = memory(bias, ctx.engine, nullptr);
  p.dst_m = memory(dst, ctx.engine, nullptr);
  p.fwd_weights_m = memory(fpd.weights_desc(), ctx.engine, nullptr);
  p.bwd_data_weights_m = memory(bdpd.weights_desc(), ctx.engine, nullptr);
  p.bwd_weights_m = memory(bwpd.diff_weights_desc(), ctx.engine, nullptr);
}

ConvPrimitives& conv_primitives(const Conv2dShape& s) {
  thread_local std::vector<std::unique_ptr<ConvPrimitives>> cache;
  for (auto& entry : cache)
    if (entry->shape == s) return *entry;
  auto entry = std::make_unique<ConvPrimitives>();
  make_conv(*entry, s);
  cache.push_back(std::move(entry));
  return *cache.back();
}

// The kernel in the layout `layout` wants: itself, or reordered into the layout's buffer (once
// per call, numbered by next_call()).
const float* to_primitive_layout(WeightsLayout& layout, const float* kernel, uint64_t call) {
  if (!layout.needed) return kernel;
  if (layout.filled_for == call) return layout.buffer.data();
  layout.filled_for = call;
  dnnl_execute(layout.reorder,
               {{DNNL_ARG_FROM, &layout.from, kernel}, {DNNL_ARG_TO, &layout.to, layout.buffer.data()}});
  return layout.buffer.data();
}

}  // namespace

namespace {

// The chunk's x (which 0) or dy (1), per_image values an image, as the primitives read them: itself,
// or rounded to bf16 into the thread's buffer for it.
const void* as_read(const ConvPrimitives& p, int which, const float* values, int64_t per_image) {
  if (!p.shape.bf16) return values;
  thread_local std::vector<uint16_t> rounded[2];
  auto n = static_cast<size_t>(p.shape.n * per_image);
  std::vector<uint16_t>& out = rounded[which];
  if (out.size() < n) out.resize(n);
  round_to_bf16(values, out.data(), static_cast<int64_t>(n));
  return out.data();
}

uint64_t next_call() {
  static std::atomic<uint64_t> calls{0};
  return calls.fetch_add(1, std::memory_order_relaxed) + 1;
}

// The batch's chunks: whole images, fixed by the shape.
struct ImageChunks {
  int64_t count;
  double work;
  core::Range range(int64_t c, int64_t n) const { return core::chunk_range(n, count, c); }
};
ImageChunks image_chunks(const Conv2dShape& s) {
  double work = 2.0 * static_cast<double>(s.n * s.oh * s.ow) * static_cast<double>(s.f * s.kh * s.kw * s.c);
  return {core::split_chunks(s.n, work), work};
}
Conv2dShape images(Conv2dShape s, core::Range r) {
  s.n = r.end - r.begin;
  return s;
}

// Runs fn(primitives, chunk's images, call) on each chunk with images; the call number lets a
// thread's chunks reorder the kernel once.
template <class F>
void for_image_chunks(const Conv2dShape& s, const F& fn) {
  ImageChunks chunks = image_chunks(s);
  uint64_t call = next_call();
  core::parallel_for(chunks.count, chunks.work, [&](int64_t c) {
    core::Range r = chunks.range(c, s.n);
    if (r.begin < r.end) fn(conv_primitives(images(s, r)), r.begin, call);
  });
}

// Each chunk's forward into y_of(its images), then then(first image, images, y): Tandem's own
// loops for a small convolution (conv2d_is_small), else oneDNN's primitive.
template <class Y, class Then>
void forward_chunks(const Conv2dShape& s, const float* x, const float* kernel, const float* bias, const Y& y_of,
                    const Then& then) {
  ImageChunks chunks = image_chunks(s);
  uint64_t call = next_call();
  int64_t in_image = s.h * s.w * s.c;
  core::parallel_for(chunks.count, chunks.work, [&](int64_t c) {
    core::Range r = chunks.range(c, s.n);
    if (r.begin == r.end) return;
    Conv2dShape chunk = images(s, r);
    float* y = y_of(r);
    if (conv2d_is_small(chunk)) {
      conv2d_small_forward(chunk, x + r.begin * in_image, kernel, bias, y);
    } else {
      ConvPrimitives& p = conv_primitives(chunk);
      dnnl_execute(p.forward,
                   {{DNNL_ARG_SRC, &p.src_in_m, as_read(p, 0, x + r.begin * in_image, in_image)},
                    {DNNL_ARG_WEIGHTS, &p.fwd_weights_m, to_primitive_layout(p.forward_weights, kernel, call)},
                    {DNNL_ARG_BIAS, &p.bias_m, bias != nullptr ? bias : p.zero_bias.data()},
                    {DNNL_ARG_DST, &p.dst_m, y}});
    }
    then(r.begin, chunk.n, y);
  });
}

}  // namespace

void conv2d_forward(const Conv2dShape& s, const float* x, const float* kernel, const float* bias, float* y) {
  forward_chunks(
      s, x, kernel, bias, [&](core::Range r) { return y + r.begin * s.oh * s.ow * s.f; },
      [](int64_t, int64_t, const float*) {});
}

void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* kernel, float* dx) {
  for_image_chunks(s, [&](ConvPrimitives& p, int64_t first, uint64_t call) {
    dnnl_execute(p.backward_data,
                 {{DNNL_ARG_DIFF_DST, &p.dst_in_m, as_read(p, 1, dy + first * s.oh * s.ow * s.f, s.oh * s.ow * s.f)},
                  {DNNL_ARG_WEIGHTS, &p.bwd_data_weights_m, to_primitive_layout(p.backward_data_weights, kernel, call)},
                  {DNNL_ARG_DIFF_SRC, &p.src_m, dx + first * s.h * s.w * s.c}});
  });
}

namespace {
// One chunk's weight and bias gradients, the weights in Keras' HWIO layout.
void backward_weights_part(const Conv2dShape& s, const float* x, const float* dy, float* dkernel, float* dbias) {
  if (conv2d_is_small(s)) return conv2d_small_backward_weights(s, x, ConvOutputGradient{dy}, dkernel, dbias);
  ConvPrimitives& p = conv_primitives(s);
  if (dbias == nullptr) dbias = p.unused_bias_gradient.data();
  WeightsLayout& g = p.weight_gradient;
  dnnl_execute(p.backward_weights, {{DNNL_ARG_SRC, &p.src_in_m, as_read(p, 0, x, s.h * s.w * s.c)},
                                    {DNNL_ARG_DIFF_DST, &p.dst_in_m, as_read(p, 1, dy, s.oh * s.ow * s.f)},
                                    {DNNL_ARG_DIFF_WEIGHTS, &p.bwd_weights_m, g.needed ? g.buffer.data() : dkernel},
                                    {DNNL_ARG_DIFF_BIAS, &p.bias_m, dbias}});
  if (g.needed) dnnl_execute(g.reorder, {{DNNL_ARG_FROM, &g.from, g.buffer.data()}, {DNNL_ARG_TO, &g.to, dkernel}});
}

// Each chunk's weight and bias gradients, part(chunk, images, dkernel, dbias), into a slot of the
// calling thread's scratch, on the intra-op pool; then summed in chunk order.
template <class Part>
void sum_chunk_gradients(const Conv2dShape& s, float* dkernel, float* dbias, const Part& part) {
  ImageChunks chunks = image_chunks(s);
  if (chunks.count == 1) return part(0, core::Range{0, s.n}, dkernel, dbias);
  int64_t weights = s.kh * s.kw * s.c * s.f, slot = weights + s.f;
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(slot * chunks.count))
    scratch.resize(static_cast<size_t>(slot * chunks.count));
  float* parts = scratch.data();
  core::parallel_for(chunks.count, chunks.work, [&](int64_t c) {
    core::Range r = chunks.range(c, s.n);
    float* slot_c = parts + c * slot;
    if (r.begin == r.end) return std::fill(slot_c, slot_c + slot, 0.0f);
    part(c, r, slot_c, slot_c + weights);
  });
  std::copy(parts, parts + weights, dkernel);
  if (dbias != nullptr) std::copy(parts + weights, parts + slot, dbias);
  for (int64_t c = 1; c < chunks.count; ++c) {
    const float* part_c = parts + c * slot;
    for (int64_t i = 0; i < weights; ++i) dkernel[i] += part_c[i];
    if (dbias != nullptr)
      for (int64_t i = 0; i < s.f; ++i) dbias[i] += part_c[weights + i];
  }
}

// A buffer of the calling thread for `values` floats (which: 0 a chunk's output, 1 its gradient).
float* thread_buffer(int which, int64_t values) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[which];
  if (b.size() < static_cast<size_t>(values)) b.resize(static_cast<size_t>(values));
  return b.data();
}

}  // namespace

void conv2d_backward_weights(const Conv2dShape& s, const float* x, const float* dy, float* dkernel, float* dbias) {
  int64_t in_image = s.h * s.w * s.c, out_image = s.oh * s.ow * s.f;
  sum_chunk_gradients(s, dkernel, dbias, [&](int64_t, core::Range r, float* dk, float* db) {
    backward_weights_part(images(s, r), x + r.begin * in_image, dy + r.begin * out_image, dk, db);
  });
}

void conv2d_small_weight_gradients(const Conv2dShape& s, const float* x,
                                   const std::function<ConvOutputGradient(int64_t first, int64_t images)>& gradient_of,
                                   float* dkernel, float* dbias) {
  sum_chunk_gradients(s, dkernel, dbias, [&](int64_t, core::Range r, float* dk, float* db) {
    conv2d_small_backward_weights(images(s, r), x + r.begin * s.h * s.w * s.c, gradient_of(r.begin, r.end - r.begin),
                                  dk, db);
  });
}

void conv2d_forward_chunks(const Conv2dShape& s, const float* x, const float* kernel, const float* bias,
                           const ConvChunkOutput& then) {
  int64_t out_image = s.oh * s.ow * s.f;
  forward_chunks(
      s, x, kernel, bias, [&](core::Range r) { return thread_buffer(0, (r.end - r.begin) * out_image); }, then);
}

void conv2d_backward_chunks(const Conv2dShape& s, const float* x, const float* kernel, const ConvChunkGradient& fill_dy,
                            float* dx, float* dkernel, float* dbias) {
  int64_t in_image = s.h * s.w * s.c, out_image = s.oh * s.ow * s.f;
  uint64_t call = next_call();
  sum_chunk_gradients(s, dkernel, dbias, [&](int64_t, core::Range r, float* dk, float* db) {
    Conv2dShape chunk = images(s, r);
    float* dy = thread_buffer(1, chunk.n * out_image);
    fill_dy(r.begin, chunk.n, dy);
    if (dx != nullptr) {
      ConvPrimitives& p = conv_primitives(chunk);
      dnnl_execute(p.backward_data, {{DNNL_ARG_DIFF_DST, &p.dst_in_m, as_read(p, 1, dy, out_image)},
                                     {DNNL_ARG_WEIGHTS, &p.bwd_data_weights_m,
                                      to_primitive_layout(p.backward_data_weights, kernel, call)},
                                     {DNNL_ARG_DIFF_SRC, &p.src_m, dx + r.begin * in_image}});
    }
    backward_weights_part(chunk, x + r.begin * in_image, dy, dk, db);
  });
}

}  // namespace tandem::kernels::cpu
