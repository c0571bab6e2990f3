// activation: x:(…) -> act(x):(…); Softmax over the last axis.
// backward: from y (and x for GELU), see kernels::Backend::activation_backward.
#include <string>

#include "core/tensor_impl.h"
#include "ops/checks.h"

namespace tandem {
namespace {
constexpr std::pair<Activation, std::string_view> kActivationNames[] = {
    {Activation::Linear, "linear"}, {Activation::ReLU, "relu"},       {Activation::ELU, "elu"},
    {Activation::SELU, "selu"},     {Activation::Tanh, "tanh"},       {Activation::Sigmoid, "sigmoid"},
    {Activation::GELU, "gelu"},     {Activation::Softmax, "softmax"},
};
}  // namespace

Activation parse_activation(std::string_view name, std::string_view owner) {
  if (name.empty() || name == "none") return Activation::Linear;
  std::string accepted;
  for (auto [act, n] : kActivationNames) {
    if (n == name) return act;
    accepted += accepted.empty() ? "" : ", ";
    accepted += n;
  }
  fail("{}: unknown activation \"{}\"; expected one of: {}", owner, name, accepted);
}

std::string_view activation_name(Activation act) {
  for (auto [a, n] : kActivationNames)
    if (a == act) return n;
  return "?";
}

Padding parse_padding(std::string_view name, std::string_view owner) {
  if (name == "valid") return Padding::Valid;
  if (name == "same") return Padding::Same;
  fail("{}: unknown padding \"{}\"; expected \"valid\" or \"same\"", owner, name);
}

namespace ops {
namespace {

struct ActivationNode : autograd::Node {
  Tensor x, y;
  Activation act;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    Tensor dx = Tensor::empty(y.shape(), DType::Float32, dy.device());
    int64_t cols = y.rank() == 0 ? 1 : y.dim(-1);
    kernels::backend(dy.device())
        .activation_backward(dy.buffer<float>(), x.defined() ? x.buffer<float>() : nullptr, y.buffer<float>(),
                             dx.buffer<float>(), y.numel() / std::max<int64_t>(cols, 1), cols, act);
    tape.accumulate(input_slots[0], dx);
  }
};

struct SoftmaxOf : TensorNote {
  explicit SoftmaxOf(Tensor x) : logits(std::move(x)) {}
  Tensor logits;
};

}  // namespace

Tensor softmax_logits(const Tensor& probabilities) {
  auto* of = probabilities.defined() ? dynamic_cast<const SoftmaxOf*>(probabilities.impl()->note.get()) : nullptr;
  return of != nullptr ? of->logits : Tensor();
}

void note_softmax_of(const Tensor& probabilities, const Tensor& logits) {
  probabilities.impl()->note = std::make_unique<SoftmaxOf>(logits);
}

Tensor activation(const Tensor& x_in, Activation act) {
  require_float(x_in, "activation", "x");
  if (act == Activation::Softmax && x_in.rank() == 0) fail("activation: softmax needs at least one axis, got a scalar");
  Tensor x = x_in.contiguous();
  Tensor y = x.clone();
  int64_t cols = y.rank() == 0 ? 1 : y.dim(-1);
  if (y.numel() > 0)
    kernels::backend(y.device()).bias_activation(y.buffer<float>(), nullptr, y.numel() / cols, cols, act);
  // A cross-entropy loss on the probabilities uses the fused, numerically stable logits path (as Keras does).
  if (act == Activation::Softmax) note_softmax_of(y, x_in);
  if (auto* tape = autograd::tracking_tape({&x_in})) {
    auto* node = new ActivationNode();
    if (kernels::activation_backward_needs_input(act)) node->x = x;
    node->y = y;
    node->act = act;
    autograd::record(tape, node, {&x_in}, y);
  }
  return y;
}

}  // namespace ops
}  // namespace tandem
