// Convolution and pooling shapes from an op's arguments.
#include "kernels/shapes.h"

#include <algorithm>

namespace tandem::kernels {

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

Pool2dShape pool2d_shape(PoolKind kind, int64_t n, int64_t h, int64_t w, int64_t c, int64_t ph, int64_t pw, int64_t sh,
                         int64_t sw, Padding padding) {
  Conv2dShape g = conv2d_shape(n, h, w, c, ph, pw, c, sh, sw, padding);
  return Pool2dShape{kind, n, h, w, c, ph, pw, sh, sw, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right, g.oh, g.ow};
}

}  // namespace tandem::kernels
