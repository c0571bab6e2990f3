#pragma once
// What every device's kernels take besides buffers: the kinds of the elementwise and loss
// families, and the shapes of convolutions and poolings, worked out once from an op's arguments
// (TensorFlow's VALID and SAME). Ops reach these and kernels/backend.h, never a device's kernels.
#include <cstdint>

#include "tandem/op_types.h"

namespace tandem::kernels {

enum class UnaryKind : uint8_t { Scale, Square, Log, Clip, Abs };
enum class BinaryKind : uint8_t { Add, Sub, Mul };
// Per-row losses over rows of per_row values: the row's mean of (p - t)² or of the binary
// cross-entropy of logits or of probabilities (clipped to [ε, 1-ε]).
enum class PointwiseLoss : uint8_t { SquaredError, BinaryCrossEntropyLogits, BinaryCrossEntropy };

// True when an activation's gradient needs its input z, not just its output y (GELU).
inline bool activation_backward_needs_input(Activation act) { return act == Activation::GELU; }

struct Conv2dShape {
  int64_t n, h, w, c;  // input NHWC
  int64_t kh, kw, f;   // kernel HWIO (KH, KW, C, F)
  int64_t sh, sw;      // strides
  int64_t pad_top, pad_left, pad_bottom, pad_right;
  int64_t oh, ow;           // output spatial size
  bool fused_relu = false;  // forward applies ReLU as a oneDNN post-op
  bool bf16 = false;        // products in bf16 (x, the kernel and dy rounded), float32 accumulation and results
  bool operator==(const Conv2dShape&) const = default;
};
Conv2dShape conv2d_shape(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t f, int64_t sh,
                         int64_t sw, Padding padding);

enum class PoolKind : uint8_t { Max, Average };
struct Pool2dShape {
  PoolKind kind;
  int64_t n, h, w, c, ph, pw, sh, sw;
  int64_t pad_top, pad_left, pad_bottom, pad_right;
  int64_t oh, ow;
  bool operator==(const Pool2dShape&) const = default;
};
Pool2dShape pool2d_shape(PoolKind kind, int64_t n, int64_t h, int64_t w, int64_t c, int64_t ph, int64_t pw, int64_t sh,
                         int64_t sw, Padding padding);

}  // namespace tandem::kernels
