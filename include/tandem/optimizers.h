#pragma once
// Optimizers and learning-rate schedules. An optimizer's slots (momenta, moments) and its step
// count are part of the model's state.
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/layers.h"

namespace tandem {

// Learning rate as a function of the optimizer's step (0-based, before the update).
class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  virtual float operator()(int64_t step) const = 0;
};

// lr · rate^(step / decay_steps), the exponent floored when staircase.
class ExponentialDecay : public LearningRateSchedule {
 public:
  ExponentialDecay(float initial_learning_rate, int64_t decay_steps, float decay_rate, bool staircase = false);
  float operator()(int64_t step) const override;

 private:
  float initial_, rate_;
  int64_t steps_;
  bool staircase_;
};

// values[i] while step <= boundaries[i] (and after the last boundary, the last value).
class PiecewiseConstantDecay : public LearningRateSchedule {
 public:
  PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<float> values);
  float operator()(int64_t step) const override;

 private:
  std::vector<int64_t> boundaries_;
  std::vector<float> values_;
};

class Optimizer;

// The seam between the optimizers and the strategies: where Optimizer::apply sends the gradients
// instead of updating here. The strategies' update rules (tandem/distribute/update_rule.h) are
// routes: they reduce the gradients over the replicas and choose who updates which copy of the
// variables, so that an optimizer knows nothing of replicas or processes.
class UpdateRoute {
 public:
  virtual ~UpdateRoute() = default;
  virtual void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) = 0;
};

// Keras' gradient clipping, every optimizer's (0: off): `clipnorm` scales each gradient to at most
// that L2 norm, `global_clipnorm` all of a step's gradients together to at most that norm (by one
// factor), `clipvalue` cuts each element to [-clipvalue, clipvalue]; in that order, applied to the
// gradients a step combined over its replicas and workers, so that the result does not depend on
// their count. clipnorm and global_clipnorm are not set together (Keras' rule).
struct GradientClipping {
  float clipnorm = 0.0f;
  float clipvalue = 0.0f;
  float global_clipnorm = 0.0f;
  bool by_norm() const { return clipnorm > 0.0f || global_clipnorm > 0.0f; }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // Applies one update to each variable from its gradient (same order, same shapes), or hands
  // them to the route in force: the optimizer's own (hvd::DistributedOptimizer sets one), else
  // the running replica's (ReplicaContext::update_route, a strategy's update rule: with
  // MirroredStrategy the gradients are summed over the replicas, then every replica updates its
  // own copy).
  void apply(std::span<Variable* const> variables, std::span<const Tensor> gradients);
  // The update itself, here, on these variables with this optimizer's slots.
  void apply_here(std::span<Variable* const> variables, std::span<const Tensor> gradients);
  // The optimizer's own route (null: none; copies share it).
  void set_route(std::shared_ptr<UpdateRoute> route) { route_ = std::move(route); }
  UpdateRoute* route() const { return route_.get(); }
  // Unique to this object and its state (a copy has its own; load_state gives a new one), so that
  // what is kept beside an optimizer (a strategy's replica copies of its slots) is never taken for
  // another's or outlives a restore.
  uint64_t id() const { return id_; }
  int64_t iterations() const { return iterations_; }
  // The step count, for an optimizer whose updates ran on copies of it (a model-parallel
  // strategy's shards update theirs).
  void set_iterations(int64_t iterations) { iterations_ = iterations; }
  float current_learning_rate() const;
  void set_learning_rate(float lr);
  void set_learning_rate(std::shared_ptr<LearningRateSchedule> schedule) { schedule_ = std::move(schedule); }
  // Named state tensors ("optimizer/iterations", "optimizer/dense/kernel/m", …) for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state();
  // Restores what state() returned; creates slots that do not exist yet.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, std::span<Variable* const> variables);
  virtual std::unique_ptr<Optimizer> clone() const = 0;
  // Creates the slots for these variables (done by the first apply otherwise).
  void build(std::span<Variable* const> variables);
  // A copy with its own slots holding the same values, for the variables given (a replica's).
  std::unique_ptr<Optimizer> replicate(std::span<Variable* const> variables);
  // A copy that updates `variables`, some of those this optimizer keeps slots for (built), in
  // this optimizer's own slots (a pipeline stage's share of the update); it counts its own steps.
  std::unique_ptr<Optimizer> part(std::span<Variable* const> variables) const;
  // Lets its slots go (a strategy that keeps them elsewhere, in pieces); the next update or build
  // makes them again.
  void forget_slots() {
    slot_owners_.clear();
    slots_.clear();
  }
  // The slots it keeps for each trainable variable (Adam: m and v).
  virtual int slots_per_variable() const = 0;
  void set_clipping(GradientClipping clipping);
  const GradientClipping& clipping() const { return clipping_; }
  // A strategy whose updates see pieces of variables (whole_variables false: ZeRO's shards, tensor
  // parallelism's slices) or a share of them (all_variables false: a pipeline stage's, a parameter
  // server's) refuses the norms it cannot take there, naming itself.
  void check_clipping_applies(std::string_view strategy, bool whole_variables, bool all_variables) const;
  // Keras 3's decoupled weight decay (AdamW's; every optimizer's `weight_decay`): each variable
  // times (1 - lr · weight_decay) before its update, as torch.optim.AdamW. 0: none.
  void set_weight_decay(float weight_decay);
  float weight_decay() const { return weight_decay_; }
  // Whether an update adds each variable's regularizer gradient (Variable::regularizer) to its
  // gradient, before clipping: on while fit runs (its loss holds the penalties, as Keras' fit adds
  // model.losses), off otherwise, since a custom loop adds model.losses to its own loss. Shared
  // with the optimizer's copies (a replica's, a shard's, a stage's), which strategies keep from one
  // fit to a custom loop after it: the switch reaches them all.
  void set_regularizes(bool regularizes) { regularizes_->store(regularizes); }
  bool regularizes() const { return regularizes_->load(); }
  // Keras' config keys for its hyperparameters besides the learning rate ({"beta_1", 0.9}, ...;
  // booleans as 0 or 1), as a .keras file's compile_config holds them.
  virtual std::vector<std::pair<std::string, double>> config() const { return {}; }

 protected:
  explicit Optimizer(float learning_rate);
  virtual const char* slot_name(int i) const = 0;
  virtual float slot_initial_value(int) const { return 0.0f; }
  virtual void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) = 0;

 private:
  // The gradients clipped as clipping() says (none: as they are).
  std::vector<Tensor> clipped_gradients(std::span<const Tensor> gradients) const;
  // Each object's own, copies included.
  struct Id {
    Id();
    Id(const Id&) : Id() {}
    Id& operator=(const Id&) { return *this; }
    operator uint64_t() const { return value; }
    uint64_t value;
  };
  Id id_;
  float learning_rate_;
  std::shared_ptr<LearningRateSchedule> schedule_;
  std::shared_ptr<UpdateRoute> route_;
  int64_t iterations_ = 0;
  GradientClipping clipping_;
  float weight_decay_ = 0.0f;
  std::shared_ptr<std::atomic<bool>> regularizes_ = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::string> slot_owners_;  // variable names, one per slot group
  std::vector<Tensor> slots_;             // slots_per_variable() per variable
};

namespace optimizers {

struct SGDOptions {
  float momentum = 0.0f;
  bool nesterov = false;
};
class SGD : public Optimizer {
 public:
  explicit SGD(float learning_rate = 0.01f, SGDOptions options = {});
  std::string name() const override { return "SGD"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<SGD>(*this); }
  std::vector<std::pair<std::string, double>> config() const override {
    return {{"momentum", options_.momentum}, {"nesterov", options_.nesterov ? 1.0 : 0.0}};
  }

 private:
  int slots_per_variable() const override { return options_.momentum != 0.0f ? 1 : 0; }
  const char* slot_name(int) const override { return "momentum"; }
  void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) override;
  SGDOptions options_;
};

struct AdamOptions {
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
};
class Adam : public Optimizer {
 public:
  explicit Adam(float learning_rate = 0.001f, AdamOptions options = {});
  std::string name() const override { return "Adam"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<Adam>(*this); }
  std::vector<std::pair<std::string, double>> config() const override {
    return {{"beta_1", options_.beta_1}, {"beta_2", options_.beta_2}, {"epsilon", options_.epsilon}};
  }

 private:
  int slots_per_variable() const override { return 2; }
  const char* slot_name(int i) const override { return i == 0 ? "m" : "v"; }
  void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) override;
  AdamOptions options_;
};

// Adam with decoupled weight decay (Keras 3's AdamW, Loshchilov and Hutter): Adam whose
// weight_decay is 0.004 unless given.
class AdamW : public Adam {
 public:
  explicit AdamW(float learning_rate = 0.001f, float weight_decay = 0.004f, AdamOptions options = {});
  std::string name() const override { return "AdamW"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<AdamW>(*this); }
};

struct RMSpropOptions {
  float rho = 0.9f;
  float momentum = 0.0f;
  float epsilon = 1e-7f;
};
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(float learning_rate = 0.001f, RMSpropOptions options = {});
  std::string name() const override { return "RMSprop"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<RMSprop>(*this); }
  std::vector<std::pair<std::string, double>> config() const override {
    return {{"rho", options_.rho}, {"momentum", options_.momentum}, {"epsilon", options_.epsilon}};
  }

 private:
  int slots_per_variable() const override { return options_.momentum != 0.0f ? 2 : 1; }
  const char* slot_name(int i) const override { return i == 0 ? "rms" : "momentum"; }
  void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) override;
  RMSpropOptions options_;
};

struct AdagradOptions {
  float initial_accumulator_value = 0.1f;
  float epsilon = 1e-7f;
};
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(float learning_rate = 0.001f, AdagradOptions options = {});
  std::string name() const override { return "Adagrad"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<Adagrad>(*this); }
  std::vector<std::pair<std::string, double>> config() const override {
    return {{"initial_accumulator_value", options_.initial_accumulator_value}, {"epsilon", options_.epsilon}};
  }

 private:
  int slots_per_variable() const override { return 1; }
  const char* slot_name(int) const override { return "accumulator"; }
  float slot_initial_value(int) const override { return options_.initial_accumulator_value; }
  void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) override;
  AdagradOptions options_;
};

// "sgd", "adam", "adamw", "rmsprop", "adagrad" with their Keras defaults.
std::unique_ptr<Optimizer> by_name(const std::string& name);

}  // namespace optimizers
}  // namespace tandem
