// Convolution and pooling kernels (C++17, nvcc): a convolution's im2col matrix and its gradient's
// way back to the input (the products are cuBLAS's, in backend.cpp), pooling as direct loops: one
// thread per output value, each value summed in a fixed order (no atomics), so the bits repeat run
// to run. Gradients that several windows share are gathered, not scattered.
#include <cuda_runtime.h>

#include "cuda/device_api.h"
#include "cuda/grid.cuh"
#include "kernels/elements.h"

namespace tandem::cuda::launch {
namespace {
namespace elements = kernels::elements;
// The outputs o (0 ≤ o < outputs) whose window [o·stride - pad, … + window) holds input i.
__device__ inline void windows_holding(int64_t i, int64_t pad, int64_t window, int64_t stride, int64_t outputs,
                                       int64_t& first, int64_t& last) {
  int64_t top = i + pad;  // the window starts at o·stride ≤ top and ends past it
  first = top - window + 1 <= 0 ? 0 : (top - window + 1 + stride - 1) / stride;
  last = top / stride;
  if (last > outputs - 1) last = outputs - 1;
}
}  // namespace

namespace {
elements::ConvGeometry geometry(const Conv& s) {
  return {s.h, s.w, s.c, s.kh, s.kw, s.sh, s.sw, s.pad_top, s.pad_left, s.oh, s.ow};
}
}  // namespace

int im2col(const Conv& s, const float* x, int64_t first_image, int64_t images, float* cols, uint16_t* cols16,
           void* stream) {
  elements::ConvGeometry g = geometry(s);
  int64_t k = s.kh * s.kw * s.c, first_row = first_image * s.oh * s.ow;
  return each(images * s.oh * s.ow * k, stream, [=] __device__(int64_t e) {
    int64_t from = elements::im2col_source(g, first_row + e / k, e % k);
    float v = from < 0 ? 0.0f : x[from];
    if (cols16 != nullptr) cols16[e] = elements::to_bf16(v);
    else cols[e] = v;
  });
}

int col2im(const Conv& s, const float* dcols, int64_t first_image, int64_t images, float* dx, void* stream) {
  elements::ConvGeometry g = geometry(s);
  int64_t k = s.kh * s.kw * s.c, first_row = first_image * s.oh * s.ow, first = first_image * s.h * s.w * s.c;
  return each(images * s.h * s.w * s.c, stream, [=] __device__(int64_t e) {
    float acc = 0.0f;
    elements::im2col_readers(g, first + e, [&](int64_t r, int64_t col) { acc += dcols[(r - first_row) * k + col]; });
    dx[first + e] = acc;
  });
}

int pool2d_forward(const Pool& s, const float* x, float* y, int32_t* argmax, void* stream) {
  elements::ConvGeometry g{s.h, s.w, s.c, s.ph, s.pw, s.sh, s.sw, s.pad_top, s.pad_left, s.oh, s.ow};
  return each(s.n * s.oh * s.ow * s.c, stream, [=] __device__(int64_t e) {
    int64_t c = e % s.c, ox = (e / s.c) % s.ow, oy = (e / (s.c * s.ow)) % s.oh, n = e / (s.c * s.ow * s.oh);
    float best = 0.0f, total = 0.0f;
    int64_t at = -1, count = 0;  // the maximum's place in the window (py·pw + px)
    elements::window_places(g, oy, ox, [&](int64_t place, int64_t iy, int64_t ix) {
      float v = x[((n * s.h + iy) * s.w + ix) * s.c + c];
      if (at < 0 || v > best) best = v, at = place;
      total += v;
      ++count;
    });
    if (s.max) {
      y[e] = best;
      argmax[e] = int32_t(at);
    } else {
      y[e] = count > 0 ? total / float(count) : 0.0f;
    }
  });
}

namespace {
// dx at input e gathered from the pooled outputs o whose windows hold it: weight(o, e's place in
// o's window, o's row, o's column) for each, in the outputs' order.
template <class Weight>
int gather_windows(const Pool& s, float* dx, void* stream, Weight weight) {
  return each(s.n * s.h * s.w * s.c, stream, [=] __device__(int64_t e) {
    int64_t c = e % s.c, ix = (e / s.c) % s.w, iy = (e / (s.c * s.w)) % s.h, n = e / (s.c * s.w * s.h);
    int64_t y0, y1, x0, x1;
    windows_holding(iy, s.pad_top, s.ph, s.sh, s.oh, y0, y1);
    windows_holding(ix, s.pad_left, s.pw, s.sw, s.ow, x0, x1);
    float acc = 0.0f;
    for (int64_t oy = y0; oy <= y1; ++oy)
      for (int64_t ox = x0; ox <= x1; ++ox) {
        int64_t place = (iy - (oy * s.sh - s.pad_top)) * s.pw + (ix - (ox * s.sw - s.pad_left));
        acc += weight(((n * s.oh + oy) * s.ow + ox) * s.c + c, place, oy, ox);
      }
    dx[e] = acc;
  });
}
}  // namespace

int pool2d_backward(const Pool& s, const float* dy, const int32_t* argmax, float* dx, void* stream) {
  if (s.max)
    return gather_windows(s, dx, stream, [=] __device__(int64_t o, int64_t place, int64_t, int64_t) {
      return argmax[o] == place ? dy[o] : 0.0f;
    });
  return gather_windows(s, dx, stream, [=] __device__(int64_t o, int64_t, int64_t oy, int64_t ox) {
    int64_t rows = elements::window_inside(oy, s.sh, s.pad_top, s.ph, s.h),
            cols = elements::window_inside(ox, s.sw, s.pad_left, s.pw, s.w);
    return dy[o] / float(rows * cols);
  });
}

int unpool_relu(const Pool& s, const float* p, const int32_t* argmax, const float* dp, float* dy, void* stream) {
  return gather_windows(s, dy, stream, [=] __device__(int64_t o, int64_t place, int64_t, int64_t) {
    return argmax[o] == place && p[o] > 0.0f ? dp[o] : 0.0f;
  });
}

}  // namespace tandem::cuda::launch
