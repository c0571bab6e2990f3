// dropout: x:(B,…) -> x·mask/(1-rate), mask drawn from Philox(seed, step) at index
// (sample_offset + b)·features + feature_offset + i, so each sample's mask is the same however the
// batch is split, and a slice of its features draws what the whole sample does there.
// backward: dy·mask/(1-rate).
#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct DropoutNode : autograd::Node {
  Tensor scaled_mask;
  void backward(GradientTape& tape, const Tensor& dy) override {
    tape.accumulate(input_slots[0], mul(dy, scaled_mask));
  }
};

}  // namespace

Tensor dropout(const Tensor& x_in, float rate, const RandomKey& key) {
  require_float(x_in, "dropout", "x");
  if (!(rate >= 0.0f && rate < 1.0f)) fail("dropout: rate must be in [0, 1), got {}", rate);
  if (x_in.rank() < 1) fail("dropout: x needs a batch axis, got a scalar");
  Tensor x = x_in.contiguous();
  Tensor mask = Tensor::empty(x.shape(), DType::Float32, x.device());
  Tensor y = Tensor::empty(x.shape(), DType::Float32, x.device());
  int64_t rows = x.dim(0), per_sample = x.numel() / std::max<int64_t>(rows, 1);
  int64_t features = key.features > 0 ? key.features : per_sample;
  if (key.feature_offset < 0 || key.feature_offset + per_sample > features)
    fail("dropout: a slice of {} features at feature {} does not fit samples of {} features", per_sample,
         key.feature_offset, features);
  kernels::backend(x.device())
      .dropout(x.buffer<float>(), y.buffer<float>(), mask.buffer<float>(), rows, per_sample, rate, key.seed, key.step,
               key.sample_offset, features, key.feature_offset);
  if (auto* tape = autograd::tracking_tape({&x_in})) {
    auto* node = new DropoutNode();
    node->scaled_mask = mask;
    autograd::record(tape, node, {&x_in}, y);
  }
  return y;
}

}  // namespace tandem::ops
