// dropout: x:(B,…) -> x·mask/(1-rate), mask drawn from Philox(seed, step) at index
// (sample_offset + b)·per_sample + i, so each sample's mask is the same however the batch is split.
// backward: dy·mask/(1-rate).
#include "ops/checks.h"
#include "tandem/random.h"

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
  Tensor mask = Tensor::empty(x.shape()), y = Tensor::empty(x.shape());
  int64_t rows = x.dim(0), per_sample = x.numel() / std::max<int64_t>(rows, 1);
  Philox rng(key.seed, key.step);
  float keep_scale = 1.0f / (1.0f - rate);
  float* m = mask.data<float>();
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    // The row's uniforms go into its mask slots first, then become 0 or 1/(1-rate).
    float* row = m + i * per_sample;
    rng.uniforms(static_cast<uint64_t>((key.sample_offset + i) * per_sample), per_sample, row);
    for (int64_t j = 0; j < per_sample; ++j) {
      row[j] = row[j] < rate ? 0.0f : keep_scale;
      py[i * per_sample + j] = px[i * per_sample + j] * row[j];
    }
  }
  if (auto* tape = autograd::tracking_tape({&x_in})) {
    auto* node = new DropoutNode();
    node->scaled_mask = mask;
    autograd::record(tape, node, {&x_in}, y);
  }
  return y;
}

}  // namespace tandem::ops
