// The devices' layers and optimizers of a ModelParallelStrategy (shards.h).
#include "distribute/model_parallel/shards.h"

namespace tandem::distribute {

using layers::TensorParallelDense;

namespace {

const std::string kOptimizer = "optimizer/";

std::vector<Variable*> trainable(const std::vector<std::shared_ptr<layers::Layer>>& stack) {
  std::vector<Variable*> out;
  for (const auto& l : stack)
    for (Variable& v : l->variables())
      if (v.trainable) out.push_back(&v);
  return out;
}

// "optimizer/dense/kernel/m" -> {"dense/kernel", "m"}; nullopt for another entry.
std::optional<std::pair<std::string, std::string>> slot_of(const std::string& entry) {
  if (!entry.starts_with(kOptimizer)) return std::nullopt;
  auto last = entry.rfind('/');
  if (last <= kOptimizer.size()) return std::nullopt;
  return std::make_pair(entry.substr(kOptimizer.size(), last - kOptimizer.size()), entry.substr(last + 1));
}

}  // namespace

void ModelParallelExtended::Shards::keep(const std::vector<std::shared_ptr<layers::Layer>>& whole, int device,
                                         const std::vector<std::shared_ptr<layers::Layer>>& mine) {
  std::lock_guard lock(mutex_);
  if (device == 0) {
    whole_ = whole;
    of_device_.clear();
    optimizers_.clear();
    by_name_.clear();
    model_optimizer_ = nullptr;
    whole_holds_ = false;
    for (size_t i = 0; i < whole.size(); ++i)
      for (size_t k = 0; k < whole[i]->variables().size(); ++k) by_name_[whole[i]->variables()[k].name] = {i, k};
  }
  if (static_cast<int>(of_device_.size()) != device)
    fail("ModelParallelStrategy: device {}'s layers made before device {}'s", device, of_device_.size());
  of_device_.push_back(mine);
}

std::optional<ModelParallelExtended::Shards::Where> ModelParallelExtended::Shards::where(
    const std::string& variable) const {
  auto it = by_name_.find(variable);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

Tensor ModelParallelExtended::Shards::whole_of(const Where& at, const std::function<Tensor(int)>& piece) const {
  const Tensor& model = whole_[at.layer]->variables()[at.variable].value;
  auto* split = dynamic_cast<const TensorParallelDense*>(of_device_[0][at.layer].get());
  if (split == nullptr) return piece(0).clone();  // the same on every device
  // Over processes each holds its piece: put into zeros, summed over the copy's pieces.
  Tensor out = across_ != nullptr ? Tensor::zeros(model.shape()) : Tensor::empty(model.shape());
  for (int d = 0; d < devices_; ++d) {
    auto& mine = static_cast<const TensorParallelDense&>(*of_device_[static_cast<size_t>(d)][at.layer]);
    if (mine.holds(at.variable)) mine.put(at.variable, piece(d), out);
  }
  if (across_ != nullptr) across_->all_reduce(out.data<float>(), out.numel(), DataType::Float32, ReduceOp::Sum);
  return out;
}

Tensor ModelParallelExtended::Shards::device_slot(int device, const std::string& name, const std::string& slot) const {
  std::string entry = kOptimizer + name + "/" + slot;
  for (auto& [key, tensor] : optimizers_[static_cast<size_t>(device)]->state())
    if (key == entry) return tensor;
  fail("ModelParallelStrategy: device {}'s optimizer has no \"{}\"", device, entry);
}

Optimizer& ModelParallelExtended::Shards::optimizer(Optimizer& model_optimizer, int device,
                                                    std::span<Variable* const> variables) {
  std::lock_guard lock(mutex_);
  if (!made()) fail("ModelParallelStrategy: an update before the devices' layers were made");
  if (optimizers_.empty() || optimizer_id_ != model_optimizer.id()) {
    std::vector<Variable*> whole_trainable = trainable(whole_);
    model_optimizer.build(whole_trainable);
    auto whole_state = model_optimizer.state();
    optimizers_.clear();
    for (int d = 0; d < devices_; ++d) {
      const auto& stack = of_device_[static_cast<size_t>(d)];
      std::vector<std::pair<std::string, Tensor>> mine;
      for (const auto& [entry, tensor] : whole_state) {
        auto slot = slot_of(entry);
        std::optional<Where> at = slot ? where(slot->first) : std::nullopt;
        if (!at) {
          mine.emplace_back(entry, tensor);  // the step count
          continue;
        }
        auto* split = dynamic_cast<const TensorParallelDense*>(stack[at->layer].get());
        if (split != nullptr && !split->holds(at->variable)) continue;  // another device's
        mine.emplace_back(entry, split != nullptr ? split->cut(at->variable, tensor) : tensor.clone());
      }
      std::unique_ptr<Optimizer> copy = model_optimizer.replicate({});
      copy->load_state(mine, trainable(stack));
      optimizers_.push_back(std::move(copy));
    }
    optimizer_id_ = model_optimizer.id();
    model_optimizer_ = &model_optimizer;
  }
  std::vector<Variable*> expected = trainable(of_device_[static_cast<size_t>(device)]);
  if (!std::equal(variables.begin(), variables.end(), expected.begin(), expected.end()))
    fail(
        "ModelParallelStrategy: the optimizer was given {} variables on device {}, which holds {} trainable ones: "
        "apply "
        "it to model.trainable_variables() inside the strategy's run",
        variables.size(), device, expected.size());
  return *optimizers_[static_cast<size_t>(device)];
}

void ModelParallelExtended::Shards::write_back(Optimizer* model_optimizer) {
  std::lock_guard lock(mutex_);
  if (!made()) return;
  if (model_optimizer == nullptr) model_optimizer = model_optimizer_;
  for (const auto& named : by_name_) {
    const auto& at = named.second;  // not a structured binding: clang 14's lambdas cannot capture one
    Tensor whole = whole_of(
        at, [&](int d) { return of_device_[static_cast<size_t>(d)][at.layer]->variables()[at.variable].value; });
    whole_[at.layer]->variables()[at.variable].value.copy_from(whole);
  }
  if (model_optimizer == nullptr || optimizers_.empty() || optimizer_id_ != model_optimizer->id()) return;
  model_optimizer->build(trainable(whole_));
  for (auto& [entry, tensor] : model_optimizer->state()) {  // the slots themselves
    auto slot = slot_of(entry);
    std::optional<Where> at = slot ? where(slot->first) : std::nullopt;
    if (at) tensor.copy_from(whole_of(*at, [&](int d) { return device_slot(d, slot->first, slot->second); }));
  }
  model_optimizer->set_iterations(optimizers_[0]->iterations());
}

void ModelParallelExtended::Shards::reslice() {
  std::lock_guard lock(mutex_);
  if (!made()) return;
  for (const auto& [name, at] : by_name_) {
    const Tensor& whole = whole_[at.layer]->variables()[at.variable].value;
    for (int d = 0; d < devices_; ++d) {
      layers::Layer& mine = *of_device_[static_cast<size_t>(d)][at.layer];
      auto* split = dynamic_cast<const TensorParallelDense*>(&mine);
      if (split != nullptr && !split->holds(at.variable)) continue;
      mine.variables()[at.variable].value.copy_from(split != nullptr ? split->cut(at.variable, whole) : whole);
    }
  }
  whole_holds_ = false;
}

void ModelParallelExtended::Shards::gather(std::vector<std::pair<std::string, Tensor>>& state) {
  std::lock_guard lock(mutex_);
  if (!made() || whole_holds_) return;
  for (auto& [entry, tensor] : state) {
    if (std::optional<Where> at = where(entry)) {
      tensor = whole_of(
          *at, [&](int d) { return of_device_[static_cast<size_t>(d)][at->layer]->variables()[at->variable].value; });
    } else if (auto slot = slot_of(entry); slot && !optimizers_.empty()) {
      if (std::optional<Where> of = where(slot->first))
        tensor = whole_of(*of, [&](int d) { return device_slot(d, slot->first, slot->second); });
    }
  }
}

int64_t ModelParallelExtended::Shards::bytes_per_device(int slots) const {
  int64_t most = 0;
  for (const auto& stack : of_device_) {
    int64_t bytes = 0;
    for (const auto& l : stack)
      for (const Variable& v : l->variables()) bytes += v.value.numel() * 4 * (1 + (v.trainable ? slots : 0));
    most = std::max(most, bytes);
  }
  return most;
}

}  // namespace tandem::distribute
