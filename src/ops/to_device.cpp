// Moving a tensor between devices, differentiably: a placed layer's activations go to its device
// and their gradients come back the same way.
#include "ops/checks.h"
#include "tandem/devices.h"

namespace tandem::ops {
namespace {

struct ToDeviceNode : autograd::Node {
  Device source;
  void backward(GradientTape& tape, const Tensor& dy) override {
    set_compute_device(source);  // the ops before this one in the forward pass ran there
    tape.accumulate(input_slots[0], dy.to(source));
  }
};

}  // namespace

Tensor to_device(const Tensor& x, Device device) {
  if (!x.defined()) fail("to_device: argument 'x' is undefined");
  if (x.device() == device) return x;
  check_device(device, "to_device");
  Tensor y = x.to(device);
  if (auto* tape = autograd::tracking_tape({&x})) {
    auto* node = new ToDeviceNode();
    node->source = x.device();
    autograd::record(tape, node, {&x}, y);
  }
  // A placed softmax layer's output, moved back, is still softmax of its (moved) logits: a loss
  // scores it through them as it would on one device, to the same bits.
  if (Tensor logits = softmax_logits(x); logits.defined()) note_softmax_of(y, to_device(logits, device));
  return y;
}

}  // namespace tandem::ops
