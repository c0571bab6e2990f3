// Max and average pooling through oneDNN, channels last. Max pooling keeps oneDNN's workspace
// (the argmax record) for the backward pass.
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

struct PoolPrimitives {
  Pool2dShape shape;
  int threads = 0;
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
  int threads = num_threads();  // as for convolutions: a primitive's work split is fixed when made
  for (auto& entry : cache)
    if (entry->shape == s && entry->threads == threads) return *entry;
  cache.push_back(std::make_unique<PoolPrimitives>(make_pool(s)));
  cache.back()->threads = threads;
  return *cache.back();
}

}  // namespace

Pool2dShape pool2d_shape(PoolKind kind, int64_t n, int64_t h, int64_t w, int64_t c, int64_t ph, int64_t pw,
                         int64_t sh, int64_t sw, Padding padding) {
  Conv2dShape geometry = conv2d_shape(n, h, w, c, ph, pw, c, sh, sw, padding);
  return Pool2dShape{kind, n, h, w, c, ph, pw, sh, sw, geometry.pad_top, geometry.pad_left, geometry.pad_bottom,
                     geometry.pad_right, geometry.oh, geometry.ow};
}

size_t pool2d_workspace_bytes(const Pool2dShape& s) { return pool_primitives(s).workspace_bytes; }

void pool2d_forward(const Pool2dShape& s, const float* x, float* y, void* workspace) {
  PoolPrimitives& p = pool_primitives(s);
  if (p.workspace_bytes > 0)
    dnnl_execute(p.forward, {{DNNL_ARG_SRC, &p.src_m, x}, {DNNL_ARG_DST, &p.dst_m, y},
                             {DNNL_ARG_WORKSPACE, &p.workspace_m, workspace}});
  else
    dnnl_execute(p.forward, {{DNNL_ARG_SRC, &p.src_m, x}, {DNNL_ARG_DST, &p.dst_m, y}});
}

void pool2d_backward(const Pool2dShape& s, const float* dy, const void* workspace, float* dx) {
  PoolPrimitives& p = pool_primitives(s);
  if (p.workspace_bytes > 0)
    dnnl_execute(p.backward, {{DNNL_ARG_DIFF_DST, &p.dst_m, dy}, {DNNL_ARG_DIFF_SRC, &p.src_m, dx},
                              {DNNL_ARG_WORKSPACE, &p.workspace_m, workspace}});
  else
    dnnl_execute(p.backward, {{DNNL_ARG_DIFF_DST, &p.dst_m, dy}, {DNNL_ARG_DIFF_SRC, &p.src_m, dx}});
}

}  // namespace tandem::kernels::cpu
