// 2-D convolution through oneDNN, channels last (NHWC) with Keras' HWIO kernels. oneDNN picks
// the weights layout its fastest kernels want ("any"); the kernel is reordered to it and the
// weight gradient back from it, which costs little next to a plain-layout fallback. Primitives
// are cached per thread, keyed by the full shape and the intra-op thread count (oneDNN fixes its
// work split, and so the order of its sums, when a primitive is made).
#include <memory>
#include <vector>

#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/kernels.h"
#include "tandem/runtime.h"

namespace tandem::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

// A reorder between Keras' HWIO kernel and the layout a primitive chose, with its buffer.
struct WeightsLayout {
  bool needed = false;
  dnnl::reorder reorder;
  memory from, to;
  std::vector<float> buffer;
  void init(const memory::desc& plain, const memory::desc& chosen, bool to_chosen, const dnnl::engine& engine) {
    needed = !(plain == chosen);
    if (!needed) return;
    buffer.resize(chosen.get_size() / sizeof(float));
    const memory::desc& src = to_chosen ? plain : chosen;
    const memory::desc& dst = to_chosen ? chosen : plain;
    from = memory(src, engine, nullptr);
    to = memory(dst, engine, nullptr);
    reorder = dnnl::reorder(from, to);
  }
};

struct ConvPrimitives {
  Conv2dShape shape;
  int threads = 0;
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
  WeightsLayout forward_weights, backward_data_weights, weight_gradient;
  memory src_m, bias_m, dst_m, fwd_weights_m, bwd_data_weights_m, bwd_weights_m;
  std::vector<float> zero_bias, unused_bias_gradient;  // for layers without a bias
};

void make_conv(ConvPrimitives& p, const Conv2dShape& s) {
  auto& ctx = dnnl_context();
  p.shape = s;
  memory::desc src({s.n, s.c, s.h, s.w}, f32, tag::nhwc);
  memory::desc hwio({s.f, s.c, s.kh, s.kw}, f32, tag::hwio);
  memory::desc any_weights({s.f, s.c, s.kh, s.kw}, f32, tag::any);
  memory::desc bias({s.f}, f32, tag::x);
  memory::desc dst({s.n, s.f, s.oh, s.ow}, f32, tag::nhwc);
  memory::dims strides{s.sh, s.sw}, pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
  auto algo = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr;
  if (s.fused_relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  dnnl::convolution_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, algo, src, any_weights, bias, dst, strides, pad_l, pad_r}, attr, ctx.engine);
  dnnl::convolution_backward_data::primitive_desc bdpd({algo, src, any_weights, dst, strides, pad_l, pad_r},
                                                       ctx.engine, fpd);
  dnnl::convolution_backward_weights::primitive_desc bwpd({algo, src, any_weights, bias, dst, strides, pad_l, pad_r},
                                                          ctx.engine, fpd);
  p.forward = dnnl::convolution_forward(fpd);
  p.backward_data = dnnl::convolution_backward_data(bdpd);
  p.backward_weights = dnnl::convolution_backward_weights(bwpd);
  p.forward_weights.init(hwio, fpd.weights_desc(), true, ctx.engine);
  p.backward_data_weights.init(hwio, bdpd.weights_desc(), true, ctx.engine);
  p.weight_gradient.init(hwio, bwpd.diff_weights_desc(), false, ctx.engine);
  p.zero_bias.assign(static_cast<size_t>(s.f), 0.0f);
  p.unused_bias_gradient.resize(static_cast<size_t>(s.f));
  p.src_m = memory(src, ctx.engine, nullptr);
  p.bias_m = memory(bias, ctx.engine, nullptr);
  p.dst_m = memory(dst, ctx.engine, nullptr);
  p.fwd_weights_m = memory(fpd.weights_desc(), ctx.engine, nullptr);
  p.bwd_data_weights_m = memory(bdpd.weights_desc(), ctx.engine, nullptr);
  p.bwd_weights_m = memory(bwpd.diff_weights_desc(), ctx.engine, nullptr);
}

ConvPrimitives& conv_primitives(const Conv2dShape& s) {
  thread_local std::vector<std::unique_ptr<ConvPrimitives>> cache;
  int threads = num_threads();
  for (auto& entry : cache)
    if (entry->shape == s && entry->threads == threads) return *entry;
  auto entry = std::make_unique<ConvPrimitives>();
  make_conv(*entry, s);
  entry->threads = threads;
  cache.push_back(std::move(entry));
  return *cache.back();
}

// The kernel in the layout `layout` wants: itself, or reordered into the layout's buffer.
const float* to_primitive_layout(WeightsLayout& layout, const float* kernel) {
  if (!layout.needed) return kernel;
  dnnl_execute(layout.reorder, {{DNNL_ARG_FROM, &layout.from, kernel}, {DNNL_ARG_TO, &layout.to, layout.buffer.data()}});
  return layout.buffer.data();
}

}  // namespace

Conv2dShape conv2d_shape(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t f, int64_t sh,
                         int64_t sw, Padding padding) {
  Conv2dShape s{n, h, w, c, kh, kw, f, sh, sw, 0, 0, 0, 0, 0, 0, false};
  if (padding == Padding::Valid) {
    s.oh = (h - kh) / sh + 1;
    s.ow = (w - kw) / sw + 1;
  } else {
    // TensorFlow's SAME: output ceil(in / stride), padding split with the extra on the bottom/right.
    s.oh = (h + sh - 1) / sh;
    s.ow = (w + sw - 1) / sw;
    int64_t ph = std::max<int64_t>((s.oh - 1) * sh + kh - h, 0);
    int64_t pw = std::max<int64_t>((s.ow - 1) * sw + kw - w, 0);
    s.pad_top = ph / 2;
    s.pad_bottom = ph - ph / 2;
    s.pad_left = pw / 2;
    s.pad_right = pw - pw / 2;
  }
  return s;
}

void conv2d_forward(const Conv2dShape& s, const float* x, const float* kernel, const float* bias, float* y) {
  ConvPrimitives& p = conv_primitives(s);
  if (bias == nullptr) bias = p.zero_bias.data();
  dnnl_execute(p.forward, {{DNNL_ARG_SRC, &p.src_m, x},
                           {DNNL_ARG_WEIGHTS, &p.fwd_weights_m, to_primitive_layout(p.forward_weights, kernel)},
                           {DNNL_ARG_BIAS, &p.bias_m, bias},
                           {DNNL_ARG_DST, &p.dst_m, y}});
}

void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* kernel, float* dx) {
  ConvPrimitives& p = conv_primitives(s);
  dnnl_execute(p.backward_data,
               {{DNNL_ARG_DIFF_DST, &p.dst_m, dy},
                {DNNL_ARG_WEIGHTS, &p.bwd_data_weights_m, to_primitive_layout(p.backward_data_weights, kernel)},
                {DNNL_ARG_DIFF_SRC, &p.src_m, dx}});
}

void conv2d_backward_weights(const Conv2dShape& s, const float* x, const float* dy, float* dkernel, float* dbias) {
  ConvPrimitives& p = conv_primitives(s);
  if (dbias == nullptr) dbias = p.unused_bias_gradient.data();
  WeightsLayout& g = p.weight_gradient;
  dnnl_execute(p.backward_weights, {{DNNL_ARG_SRC, &p.src_m, x},
                                    {DNNL_ARG_DIFF_DST, &p.dst_m, dy},
                                    {DNNL_ARG_DIFF_WEIGHTS, &p.bwd_weights_m, g.needed ? g.buffer.data() : dkernel},
                                    {DNNL_ARG_DIFF_BIAS, &p.bias_m, dbias}});
  if (g.needed) dnnl_execute(g.reorder, {{DNNL_ARG_FROM, &g.from, g.buffer.data()}, {DNNL_ARG_TO, &g.to, dkernel}});
}

}  // namespace tandem::kernels::cpu
