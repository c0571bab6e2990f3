#include "tandem/optimizers.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>

#include "kernels/backend.h"
#include "tandem/autograd.h"
#include "tandem/collectives/replica_context.h"
#include "tandem/ops.h"

namespace tandem {

Optimizer::Optimizer(float learning_rate) : learning_rate_(learning_rate) {
  // name() is not callable yet (the object is still a base), so the message names the argument only.
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate))
    fail("optimizer: learning_rate must be a positive number, got {}", learning_rate);
}

void Optimizer::set_learning_rate(float lr) {
  if (!(lr > 0.0f) || !std::isfinite(lr)) fail("{}: learning_rate must be a positive number, got {}", name(), lr);
  learning_rate_ = lr;
  schedule_.reset();
}

void Optimizer::set_clipping(GradientClipping c) {
  for (auto [value, what] : {std::pair{c.clipnorm, "clipnorm"}, std::pair{c.clipvalue, "clipvalue"},
                             std::pair{c.global_clipnorm, "global_clipnorm"}})
    if (!(value >= 0.0f) || !std::isfinite(value))
      fail("{}: {} must be a positive number (or 0: no clipping), got {}", name(), what, value);
  if (c.clipnorm > 0.0f && c.global_clipnorm > 0.0f)
    fail(
        "{}: clipnorm ({}) and global_clipnorm ({}) cannot both be set: one clips each gradient, the other all "
        "of them together",
        name(), c.clipnorm, c.global_clipnorm);
  clipping_ = c;
}

void Optimizer::check_clipping_applies(std::string_view strategy, bool whole_variables, bool all_variables) const {
  if (clipping_.clipnorm > 0.0f && !whole_variables)
    fail(
        "{}: clipnorm needs each variable's whole gradient, and {} updates pieces of variables; use "
        "global_clipnorm where it applies, clipvalue, or another strategy",
        name(), strategy);
  if (clipping_.global_clipnorm > 0.0f && !(whole_variables && all_variables))
    fail(
        "{}: global_clipnorm needs every gradient of the step in one place, and {} updates {}; use clipnorm or "
        "clipvalue, or another strategy",
        name(), strategy, whole_variables ? "a share of the variables in each place" : "pieces of variables");
}

void Optimizer::set_weight_decay(float weight_decay) {
  if (!(weight_decay >= 0.0f) || !std::isfinite(weight_decay))
    fail("{}: weight_decay must be a non-negative number, got {}", name(), weight_decay);
  weight_decay_ = weight_decay;
}

float Optimizer::current_learning_rate() const { return schedule_ ? (*schedule_)(iterations_) : learning_rate_; }

void Optimizer::build(std::span<Variable* const> variables) {
  bool same = slot_owners_.size() == variables.size();
  for (size_t i = 0; same && i < variables.size(); ++i) same = slot_owners_[i] == variables[i]->name;
  if (same) return;
  // Another set of variables (a layer frozen or unfrozen since): a variable kept keeps its slots.
  auto per = static_cast<size_t>(slots_per_variable());
  std::vector<std::string> owners;
  std::vector<Tensor> slots;
  for (Variable* v : variables) {
    auto at = std::find(slot_owners_.begin(), slot_owners_.end(), v->name);
    for (size_t i = 0; i < per; ++i) {
      bool kept = at != slot_owners_.end() &&
                  slots_[static_cast<size_t>(at - slot_owners_.begin()) * per + i].shape() == v->value.shape();
      slots.push_back(kept
                          ? slots_[static_cast<size_t>(at - slot_owners_.begin()) * per + i]
                          : Tensor::full(v->value.shape(), slot_initial_value(static_cast<int>(i)), v->value.device()));
    }
    owners.push_back(v->name);
  }
  slot_owners_ = std::move(owners);
  slots_ = std::move(slots);
}

namespace {
std::atomic<uint64_t> next_id{1};
}  // namespace

Optimizer::Id::Id() : value(next_id.fetch_add(1, std::memory_order_relaxed)) {}

void Optimizer::apply(std::span<Variable* const> variables, std::span<const Tensor> gradients) {
  if (variables.size() != gradients.size())
    fail("{}: {} variables but {} gradients", name(), variables.size(), gradients.size());
  // Its own route (Horovod's DistributedOptimizer), else the running replica's (a strategy's rule).
  UpdateRoute* route = route_.get();
  if (const distribute::ReplicaContext* replica = distribute::replica_context(); route == nullptr && replica != nullptr)
    route = replica->update_route;
  if (route != nullptr) return route->apply(*this, variables, gradients);
  apply_here(variables, gradients);
}

void Optimizer::apply_here(std::span<Variable* const> variables, std::span<const Tensor> gradients) {
  if (variables.size() != gradients.size())
    fail("{}: {} variables but {} gradients", name(), variables.size(), gradients.size());
  for (size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = *variables[i];
    const Tensor& g = gradients[i];
    if (!(g.shape() == v.value.shape()))
      fail("{}: gradient for \"{}\" has shape {}, variable has {}", name(), v.name, g.shape().str(),
           v.value.shape().str());
    if (g.device() != v.value.device())
      fail("{}: gradient for \"{}\" is on {}, the variable on {}", name(), v.name, g.device().name(),
           v.value.device().name());
  }
  build(variables);
  float lr = current_learning_rate();
  int per = slots_per_variable();
  ++iterations_;
  std::vector<Tensor> regularized;  // fit's: the penalties' gradients added, from the values before the update
  if (regularizes() &&
      std::any_of(variables.begin(), variables.end(), [](Variable* v) { return v->regularizer.any(); })) {
    StopRecording no_tape;
    regularized.assign(gradients.begin(), gradients.end());
    for (size_t i = 0; i < variables.size(); ++i)
      if (variables[i]->regularizer.any())
        regularized[i] = ops::add(gradients[i], ops::penalty_gradient(variables[i]->value, variables[i]->regularizer));
    gradients = regularized;
  }
  std::vector<Tensor> clipped = clipped_gradients(gradients);
  for (size_t i = 0; i < variables.size(); ++i) {
    Variable& v = *variables[i];
    if (weight_decay_ > 0.0f)  // decoupled: the variable shrinks before its update, as torch.optim.AdamW
      kernels::backend(v.value.device())
          .unary(kernels::UnaryKind::Scale, v.value.buffer<float>(), v.value.buffer<float>(), v.value.numel(),
                 1.0f - lr * weight_decay_, 0.0f, 0.0f);
    update(v, (clipped.empty() ? gradients[i] : clipped[i]).contiguous(),
           std::span<Tensor>(slots_).subspan(i * static_cast<size_t>(per), static_cast<size_t>(per)), lr, iterations_);
  }
}

namespace {
// Σ g² over a gradient, in double, on its device (a fixed order: the same bits every run).
double squared_norm(const Tensor& g) {
  Tensor squares = ops::square(g.contiguous());
  return kernels::backend(g.device()).sum(squares.buffer<float>(), squares.numel());
}
}  // namespace

std::vector<Tensor> Optimizer::clipped_gradients(std::span<const Tensor> gradients) const {
  const GradientClipping& c = clipping_;
  if (!c.by_norm() && c.clipvalue == 0.0f) return {};
  StopRecording no_tape;
  std::vector<Tensor> out(gradients.begin(), gradients.end());
  // Keras' clip_by_norm and clip_by_global_norm: g · c / max(‖g‖, c).
  if (c.clipnorm > 0.0f)
    for (Tensor& g : out) {
      double norm = std::sqrt(squared_norm(g));
      if (norm > c.clipnorm) g = ops::scale(g, static_cast<float>(c.clipnorm / norm));
    }
  if (c.global_clipnorm > 0.0f) {
    double total = 0.0;
    for (const Tensor& g : out) total += squared_norm(g);
    double norm = std::sqrt(total);
    if (norm > c.global_clipnorm)
      for (Tensor& g : out) g = ops::scale(g, static_cast<float>(c.global_clipnorm / norm));
  }
  if (c.clipvalue > 0.0f)
    for (Tensor& g : out) g = ops::clip(g, -c.clipvalue, c.clipvalue);
  return out;
}

std::unique_ptr<Optimizer> Optimizer::replicate(std::span<Variable* const> variables) {
  auto saved = state();
  std::unique_ptr<Optimizer> copy = clone();
  copy->slot_owners_.clear();  // clone() shares the slot tensors; the copy gets its own
  copy->slots_.clear();
  copy->load_state(saved, variables);
  return copy;
}

std::unique_ptr<Optimizer> Optimizer::part(std::span<Variable* const> variables) const {
  std::unique_ptr<Optimizer> copy = clone();  // shares the slot tensors
  copy->slot_owners_.clear();
  copy->slots_.clear();
  auto per = static_cast<size_t>(slots_per_variable());
  for (Variable* v : variables) {
    auto at = std::find(slot_owners_.begin(), slot_owners_.end(), v->name);
    if (at == slot_owners_.end()) fail("{}: part: no slots for \"{}\" (build the optimizer first)", name(), v->name);
    auto i = static_cast<size_t>(at - slot_owners_.begin());
    copy->slot_owners_.push_back(v->name);
    for (size_t k = 0; k < per; ++k) copy->slots_.push_back(slots_[i * per + k]);
  }
  return copy;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("optimizer/iterations",
                   Tensor::from_vector({1}, std::vector<int32_t>{static_cast<int32_t>(iterations_)}));
  int per = slots_per_variable();
  for (size_t i = 0; i < slot_owners_.size(); ++i)
    for (int k = 0; k < per; ++k)
      out.emplace_back(fmt::format("optimizer/{}/{}", slot_owners_[i], slot_name(k)),
                       slots_[i * static_cast<size_t>(per) + static_cast<size_t>(k)]);
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state,
                           std::span<Variable* const> variables) {
  build(variables);
  auto current = this->state();
  for (auto& entry : current) {
    const std::string& name = entry.first;
    Tensor& tensor = entry.second;
    auto it = std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == name; });
    if (it == state.end()) fail("{}: saved state has no \"{}\"", this->name(), name);
    if (!(it->second.shape() == tensor.shape()))
      fail("{}: saved \"{}\" has shape {}, expected {}", this->name(), name, it->second.shape().str(),
           tensor.shape().str());
    if (name == "optimizer/iterations") iterations_ = it->second.astype(DType::Int32).data<int32_t>()[0];
    else tensor.copy_from(it->second);
  }
  id_.value = Id().value;  // another state: what was kept beside the old one is not for this one
}

namespace optimizers {

SGD::SGD(float learning_rate, SGDOptions options) : Optimizer(learning_rate), options_(options) {
  if (!(options.momentum >= 0.0f && options.momentum < 1.0f))
    fail("SGD: momentum must be in [0, 1), got {}", options.momentum);
}

void SGD::update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t) {
  kernels::backend(v.value.device())
      .sgd_update(v.value.buffer<float>(), g.buffer<float>(), slots.empty() ? nullptr : slots[0].buffer<float>(),
                  v.value.numel(), lr, options_.momentum, options_.nesterov);
}

Adam::Adam(float learning_rate, AdamOptions options) : Optimizer(learning_rate), options_(options) {
  if (!(options.beta_1 >= 0.0f && options.beta_1 < 1.0f))
    fail("Adam: beta_1 must be in [0, 1), got {}", options.beta_1);
  if (!(options.beta_2 >= 0.0f && options.beta_2 < 1.0f))
    fail("Adam: beta_2 must be in [0, 1), got {}", options.beta_2);
  if (!(options.epsilon > 0.0f)) fail("Adam: epsilon must be positive, got {}", options.epsilon);
}

void Adam::update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) {
  kernels::backend(v.value.device())
      .adam_update(v.value.buffer<float>(), g.buffer<float>(), slots[0].buffer<float>(), slots[1].buffer<float>(),
                   v.value.numel(), lr, options_.beta_1, options_.beta_2, options_.epsilon, step);
}

AdamW::AdamW(float learning_rate, float weight_decay, AdamOptions options) : Adam(learning_rate, options) {
  set_weight_decay(weight_decay);
}

RMSprop::RMSprop(float learning_rate, RMSpropOptions options) : Optimizer(learning_rate), options_(options) {
  if (!(options.rho >= 0.0f && options.rho < 1.0f)) fail("RMSprop: rho must be in [0, 1), got {}", options.rho);
}

void RMSprop::update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t) {
  kernels::backend(v.value.device())
      .rmsprop_update(v.value.buffer<float>(), g.buffer<float>(), slots[0].buffer<float>(),
                      slots.size() > 1 ? slots[1].buffer<float>() : nullptr, v.value.numel(), lr, options_.rho,
                      options_.momentum, options_.epsilon);
}

Adagrad::Adagrad(float learning_rate, AdagradOptions options) : Optimizer(learning_rate), options_(options) {
  if (options.initial_accumulator_value < 0.0f)
    fail("Adagrad: initial_accumulator_value must be non-negative, got {}", options.initial_accumulator_value);
}

void Adagrad::update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t) {
  kernels::backend(v.value.device())
      .adagrad_update(v.value.buffer<float>(), g.buffer<float>(), slots[0].buffer<float>(), v.value.numel(), lr,
                      options_.epsilon);
}

std::unique_ptr<Optimizer> by_name(const std::string& given) {
  std::string name = given;  // Keras' names are any case ("SGD", "Adam", "RMSprop")
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name == "sgd") return std::make_unique<SGD>();
  if (name == "adam") return std::make_unique<Adam>();
  if (name == "adamw") return std::make_unique<AdamW>();
  if (name == "rmsprop") return std::make_unique<RMSprop>();
  if (name == "adagrad") return std::make_unique<Adagrad>();
  fail("optimizer: unknown optimizer \"{}\"; expected one of: sgd, adam, adamw, rmsprop, adagrad", given);
}

}  // namespace optimizers
}  // namespace tandem
