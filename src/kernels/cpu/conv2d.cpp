// 2-D convolution through oneDNN, channels last (NHWC) with Keras' HWIO kernels. Primitives are
// cached per thread, keyed by the full shape.
#include <memory>
#include <vector>

#include "kernels/cpu/dnnl_context.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

struct ConvPrimitives {
  Conv2dShape shape;
  memory::desc src, weights, bias, dst;
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
  memory src_m, weights_m, bias_m, dst_m;
};

ConvPrimitives make_conv(const Conv2dShape& s) {
  auto& ctx = dnnl_context();
  ConvPrimitives p;
  p.shape = s;
  p.src = memory::desc({s.n, s.c, s.h, s.w}, f32, tag::nhwc);
  p.weights = memory::desc({s.f, s.c, s.kh, s.kw}, f32, tag::hwio);
  p.bias = memory::desc({s.f}, f32, tag::x);
  p.dst = memory::desc({s.n, s.f, s.oh, s.ow}, f32, tag::nhwc);
  memory::dims strides{s.sh, s.sw}, pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, p.src,
                                     p.weights, p.bias, p.dst, strides, pad_l, pad_r);
  dnnl::convolution_forward::primitive_desc fpd(fd, ctx.engine);
  p.forward = dnnl::convolution_forward(fpd);
  dnnl::convolution_backward_data::desc bdd(dnnl::algorithm::convolution_direct, p.src, p.weights, p.dst, strides,
                                            pad_l, pad_r);
  p.backward_data = dnnl::convolution_backward_data({bdd, ctx.engine, fpd});
  dnnl::convolution_backward_weights::desc bwd(dnnl::algorithm::convolution_direct, p.src, p.weights, p.bias, p.dst,
                                               strides, pad_l, pad_r);
  p.backward_weights = dnnl::convolution_backward_weights({bwd, ctx.engine, fpd});
  p.src_m = memory(p.src, ctx.engine, nullptr);
  p.weights_m = memory(p.weights, ctx.engine, nullptr);
  p.bias_m = memory(p.bias, ctx.engine, nullptr);
  p.dst_m = memory(p.dst, ctx.engine, nullptr);
  return p;
}

ConvPrimitives& conv_primitives(const Conv2dShape& s) {
  thread_local std::vector<std::unique_ptr<ConvPrimitives>> cache;
  for (auto& entry : cache)
    if (entry->shape == s) return *entry;
  cache.push_back(std::make_unique<ConvPrimitives>(make_conv(s)));
  return *cache.back();
}

}  // namespace

Conv2dShape conv2d_shape(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t f, int64_t sh,
                         int64_t sw, Padding padding) {
  Conv2dShape s{n, h, w, c, kh, kw, f, sh, sw, 0, 0, 0, 0, 0, 0};
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
  std::vector<float> zeros;
  if (bias == nullptr) {
    zeros.assign(static_cast<size_t>(s.f), 0.0f);
    bias = zeros.data();
  }
  dnnl_execute(p.forward, {{DNNL_ARG_SRC, &p.src_m, x},
                           {DNNL_ARG_WEIGHTS, &p.weights_m, kernel},
                           {DNNL_ARG_BIAS, &p.bias_m, bias},
                           {DNNL_ARG_DST, &p.dst_m, y}});
}

void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* kernel, float* dx) {
  ConvPrimitives& p = conv_primitives(s);
  dnnl_execute(p.backward_data, {{DNNL_ARG_DIFF_DST, &p.dst_m, dy},
                                 {DNNL_ARG_WEIGHTS, &p.weights_m, kernel},
                                 {DNNL_ARG_DIFF_SRC, &p.src_m, dx}});
}

void conv2d_backward_weights(const Conv2dShape& s, const float* x, const float* dy, float* dkernel, float* dbias) {
  ConvPrimitives& p = conv_primitives(s);
  std::vector<float> scratch;
  if (dbias == nullptr) {
    scratch.resize(static_cast<size_t>(s.f));
    dbias = scratch.data();
  }
  dnnl_execute(p.backward_weights, {{DNNL_ARG_SRC, &p.src_m, x},
                                    {DNNL_ARG_DIFF_DST, &p.dst_m, dy},
                                    {DNNL_ARG_DIFF_WEIGHTS, &p.weights_m, dkernel},
                                    {DNNL_ARG_DIFF_BIAS, &p.bias_m, dbias}});
}

}  // namespace tandem::kernels::cpu
