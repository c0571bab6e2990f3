#include <algorithm>

#include "autograd/node.h"
#include "core/tensor_impl.h"
#include "kernels/backend.h"

namespace tandem {
namespace {

thread_local GradientTape* active_tape = nullptr;
constexpr uint64_t kEmpty = 0;  // tensor ids start at 1

uint64_t hash_id(uint64_t id) { return id * 0x9E3779B97F4A7C15ull; }
}  // namespace

StopRecording::StopRecording() : saved_(active_tape) { active_tape = nullptr; }
StopRecording::~StopRecording() { active_tape = saved_; }

void mark_trainable(const Tensor& t, bool trainable) {
  if (!t.defined()) fail("mark_trainable: tensor is undefined");
  t.impl()->trainable = trainable;
}

bool is_trainable(const Tensor& t) { return t.defined() && t.impl()->trainable; }

GradientTape::GradientTape(bool persistent) : persistent_(persistent), previous_(active_tape) {
  active_tape = this;
  keys_.assign(64, kEmpty);
  values_.assign(64, -1);
}

GradientTape::~GradientTape() {
  clear();
  if (active_tape == this) active_tape = previous_;
}

void GradientTape::end_recording() {
  if (active_tape == this) active_tape = previous_;
}

GradientTape* GradientTape::active() { return active_tape; }

void GradientTape::clear() {
  for (autograd::Node* n : nodes_) delete n;
  nodes_.clear();
  grads_.clear();
  std::fill(keys_.begin(), keys_.end(), kEmpty);
  slots_ = 0;
  used_ = false;
}

void GradientTape::reset() {
  clear();
  if (active_tape != this) {
    previous_ = active_tape;
    active_tape = this;
  }
}

int32_t GradientTape::new_slot(uint64_t id) {
  if (static_cast<size_t>(slots_ + 1) * 2 > keys_.size()) {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<int32_t> old_values = std::move(values_);
    keys_.assign(old_keys.size() * 2, kEmpty);
    values_.assign(old_keys.size() * 2, -1);
    size_t mask = keys_.size() - 1;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] == kEmpty) continue;
      size_t j = hash_id(old_keys[i]) & mask;
      while (keys_[j] != kEmpty) j = (j + 1) & mask;
      keys_[j] = old_keys[i];
      values_[j] = old_values[i];
    }
  }
  size_t mask = keys_.size() - 1;
  size_t j = hash_id(id) & mask;
  while (keys_[j] != kEmpty && keys_[j] != id) j = (j + 1) & mask;
  if (keys_[j] == id) return values_[j];
  keys_[j] = id;
  values_[j] = slots_;
  return slots_++;
}

int32_t GradientTape::slot_of(const Tensor& t) {
  if (!t.defined()) return -1;
  uint64_t id = t.id();
  size_t mask = keys_.size() - 1;
  for (size_t j = hash_id(id) & mask; keys_[j] != kEmpty; j = (j + 1) & mask)
    if (keys_[j] == id) return values_[j];
  if (is_trainable(t)) return new_slot(id);
  return -1;
}

void GradientTape::watch(const Tensor& t) {
  if (!t.defined()) fail("GradientTape::watch: tensor is undefined");
  if (t.dtype() != DType::Float32)
    fail("GradientTape::watch: only float32 tensors have gradients, got {}", to_string(t));
  new_slot(t.id());
}

void GradientTape::record(autograd::Node* node, const Tensor& output) {
  node->output_slot = new_slot(output.id());
  nodes_.push_back(node);
}

void GradientTape::accumulate(int32_t slot, Tensor grad) {
  if (slot < 0) return;
  if (grads_.size() < static_cast<size_t>(slots_)) grads_.resize(static_cast<size_t>(slots_));
  Tensor& g = grads_[static_cast<size_t>(slot)];
  if (!g.defined()) {
    g = std::move(grad);
    return;
  }
  // A tensor used twice: its gradients add up (into a new tensor, as g may be another's too).
  if (!(g.shape() == grad.shape()))
    fail("GradientTape: gradients of shapes {} and {} for one tensor", g.shape().str(), grad.shape().str());
  if (g.device() != grad.device())
    fail("GradientTape: gradients on {} and {} for one tensor", g.device().name(), grad.device().name());
  Tensor a = g.contiguous(), b = grad.contiguous(), sum = Tensor::empty(g.shape(), DType::Float32, g.device());
  kernels::backend(g.device())
      .binary(kernels::BinaryKind::Add, a.buffer<float>(), b.buffer<float>(), sum.buffer<float>(), sum.numel(),
              sum.numel());
  g = std::move(sum);
}

void GradientTape::backward(const Tensor& target, const Tensor* seed,
                            const std::function<void(size_t node)>* after_node) {
  if (used_ && !persistent_)
    fail("GradientTape::gradient: called twice on a non-persistent tape (make it with persistent=true)");
  if (seed == nullptr && target.numel() != 1)
    fail(
        "GradientTape::gradient: target must be a scalar, got shape {} (give the gradient flowing into it, "
        "output_gradient, for another)",
        target.shape().str());
  if (seed != nullptr) {
    if (!seed->defined()) fail("GradientTape::gradient: the output gradient is undefined");
    if (!(seed->shape() == target.shape()) || seed->dtype() != DType::Float32)
      fail("GradientTape::gradient: the output gradient must be float32 of the target's shape {}, got {} of {}",
           target.shape().str(), dtype_name(seed->dtype()), seed->shape().str());
    if (seed->device() != target.device())
      fail("GradientTape::gradient: the output gradient is on {}, the target on {}", seed->device().name(),
           target.device().name());
  }
  used_ = true;
  StopRecording pause;  // gradient functions use ops too
  int32_t target_slot = slot_of(target);
  grads_.clear();
  grads_.resize(static_cast<size_t>(slots_));
  if (target_slot < 0) return;
  grads_[static_cast<size_t>(target_slot)] =
      seed != nullptr ? *seed : Tensor::full(target.shape(), 1.0f, target.device());
  for (size_t k = nodes_.size(); k-- > 0;) {
    autograd::Node* node = nodes_[k];
    Tensor g = grads_[static_cast<size_t>(node->output_slot)];
    if (g.defined()) node->backward(*this, g);
    if (after_node) (*after_node)(k);
  }
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, std::span<Variable* const> variables) {
  std::vector<Tensor> sources;
  sources.reserve(variables.size());
  for (Variable* v : variables) sources.push_back(v->value);
  return gradient(target, sources);
}

void GradientTape::gradient(const Tensor& target, std::span<const Tensor> sources, std::span<Tensor> out,
                            const std::function<void(size_t source)>* ready) {
  gradient_from(target, nullptr, sources, out, ready);
}

void GradientTape::gradient(const Tensor& target, std::span<const Tensor> sources, std::span<Tensor> out,
                            const Tensor& output_gradient) {
  gradient_from(target, &output_gradient, sources, out, nullptr);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, std::span<const Tensor> sources,
                                           const Tensor& output_gradient) {
  std::vector<Tensor> out(sources.size());
  gradient_from(target, &output_gradient, sources, out, nullptr);
  return out;
}

void GradientTape::gradient_from(const Tensor& target, const Tensor* seed, std::span<const Tensor> sources,
                                 std::span<Tensor> out, const std::function<void(size_t source)>* ready) {
  if (out.size() != sources.size())
    fail("GradientTape::gradient: {} sources but {} outputs", sources.size(), out.size());
  // Source slots must exist before backward so that their gradients are kept.
  for (const Tensor& s : sources) {
    if (!s.defined()) fail("GradientTape::gradient: a source tensor is undefined");
    if (slot_of(s) < 0) new_slot(s.id());
  }
  if (grads_.size() < static_cast<size_t>(slots_)) grads_.resize(static_cast<size_t>(slots_));
  auto finish = [&](size_t i) {
    Tensor g = grads_[static_cast<size_t>(slot_of(sources[i]))];
    out[i] = g.defined() ? std::move(g) : Tensor::zeros(sources[i].shape(), DType::Float32, sources[i].device());
    if (ready) (*ready)(i);
  };
  if (ready == nullptr) {
    backward(target, seed);
    for (size_t i = 0; i < sources.size(); ++i) finish(i);
    return;
  }
  // A source's gradient is final once the earliest recorded op that reads it has run backward.
  first_use_.assign(sources.size(), -1);
  source_slots_.clear();
  for (const Tensor& s : sources) source_slots_.push_back(slot_of(s));
  for (size_t k = nodes_.size(); k-- > 0;)
    for (int32_t slot : nodes_[k]->input_slots)
      for (size_t i = 0; slot >= 0 && i < sources.size(); ++i)
        if (source_slots_[i] == slot) first_use_[i] = static_cast<int64_t>(k);
  std::function<void(size_t)> after = [&](size_t k) {
    for (size_t i = 0; i < sources.size(); ++i)
      if (first_use_[i] == static_cast<int64_t>(k)) finish(i);
  };
  backward(target, seed, &after);
  for (size_t i = 0; i < sources.size(); ++i)
    if (first_use_[i] < 0) finish(i);  // no op read it: zeros
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, std::span<const Tensor> sources) {
  std::vector<Tensor> out(sources.size());
  gradient(target, sources, out);
  return out;
}

namespace autograd {

GradientTape* tracking_tape(std::initializer_list<const Tensor*> inputs) {
  GradientTape* tape = GradientTape::active();
  if (tape == nullptr) return nullptr;
  for (const Tensor* t : inputs)
    if (t != nullptr && tape->slot_of(*t) >= 0) return tape;
  return nullptr;
}

void record(GradientTape* tape, Node* node, std::initializer_list<const Tensor*> inputs, const Tensor& output) {
  size_t i = 0;
  for (const Tensor* t : inputs) node->input_slots[i++] = t == nullptr ? -1 : tape->slot_of(*t);
  tape->record(node, output);
}

}  // namespace autograd
}  // namespace tandem
