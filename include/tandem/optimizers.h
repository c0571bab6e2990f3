#pragma once
// Optimizers and learning-rate schedules. An optimizer's slots (momenta, moments) and its step
// count are part of the model's state.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tandem/layers.h"

namespace tandem {
namespace distribute {
struct ReplicaContext;
}

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

// Runs on the gradients before each update (Horovod's DistributedOptimizer installs one that
// averages them over the processes): writes the gradients the update uses into `out`, or returns
// false to skip this update (gradients accumulated over several backward passes).
class GradientHook {
 public:
  virtual ~GradientHook() = default;
  virtual bool before_update(std::span<Variable* const> variables, std::span<const Tensor> gradients,
                             std::vector<Tensor>& out) = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // Applies one update to each variable from its gradient (same order, same shapes). Inside a
  // strategy's replica, the strategy's UpdateRule decides: with MirroredStrategy the gradients
  // are first summed over the replicas (losses are scaled by the global batch), then every
  // replica updates its own copy of the variables with its own copy of the slots; with central
  // storage replica 0 updates the one shared copy.
  void apply(std::span<Variable* const> variables, std::span<const Tensor> gradients);
  // The update itself, here, on these variables with this optimizer's slots.
  void apply_here(std::span<Variable* const> variables, std::span<const Tensor> gradients);
  // The optimizer replica `replica` updates its copy of the variables with: this one for
  // replica 0, else a copy of its slots made on the first call after forget_replicas(). Every
  // replica of the step calls it (the copies are made between two barriers of `replica`'s group).
  Optimizer& for_replica(const distribute::ReplicaContext& replica, std::span<Variable* const> variables);
  // Drops the replicas' copies of the slots; the next replicated apply copies this one's again.
  void forget_replicas();
  int64_t iterations() const { return iterations_; }
  float current_learning_rate() const;
  void set_learning_rate(float lr);
  void set_learning_rate(std::shared_ptr<LearningRateSchedule> schedule) { schedule_ = std::move(schedule); }
  // What runs on the gradients before each update (null: nothing); copies share it.
  void set_gradient_hook(std::shared_ptr<GradientHook> hook) { hook_ = std::move(hook); }
  GradientHook* gradient_hook() const { return hook_.get(); }
  // Named state tensors ("optimizer/iterations", "optimizer/dense/kernel/m", …) for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state();
  // Restores what state() returned; creates slots that do not exist yet.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, std::span<Variable* const> variables);
  virtual std::unique_ptr<Optimizer> clone() const = 0;
  // Creates the slots for these variables (done by the first apply otherwise).
  void build(std::span<Variable* const> variables);
  // A copy with its own slots holding the same values, for the variables given (a replica's).
  std::unique_ptr<Optimizer> replicate(std::span<Variable* const> variables);

 protected:
  explicit Optimizer(float learning_rate);
  virtual int slots_per_variable() const = 0;
  virtual const char* slot_name(int i) const = 0;
  virtual float slot_initial_value(int) const { return 0.0f; }
  virtual void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) = 0;

 private:
  // Replica r's optimizer (r > 0) under a mirroring strategy; a copy of an optimizer has none.
  struct ReplicaCopies {
    ReplicaCopies() = default;
    ReplicaCopies(const ReplicaCopies&) {}
    ReplicaCopies& operator=(const ReplicaCopies&) { return *this; }
    std::mutex mutex;
    std::vector<std::unique_ptr<Optimizer>> copies;
    std::atomic<bool> ready{false};
  };
  ReplicaCopies replicas_;
  float learning_rate_;
  std::shared_ptr<LearningRateSchedule> schedule_;
  std::shared_ptr<GradientHook> hook_;
  std::vector<Tensor> hooked_;  // the hook's gradients
  int64_t iterations_ = 0;
  std::vector<std::string> slot_owners_;  // variable names, one per slot group
  std::vector<Tensor> slots_;             // slots_per_variable() per variable
};

// How gradients become an update inside a strategy's replica. The strategy running the replica
// installs its rule (UsingUpdateRule), so that optimizers need not know where the variables live
// or who applies the update.
class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  // This replica's gradients: reduced over the replicas as the strategy does, then applied.
  virtual void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) = 0;
  // Gradients already reduced over the replicas: only the update.
  virtual void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                             std::span<const Tensor> reduced) = 0;
};

// This thread's rule (null outside a replica: Optimizer::apply updates here).
UpdateRule* update_rule();

// While alive, `rule` is this thread's; the previous one comes back after.
class UsingUpdateRule {
 public:
  explicit UsingUpdateRule(UpdateRule* rule);
  ~UsingUpdateRule();
  UsingUpdateRule(const UsingUpdateRule&) = delete;
  UsingUpdateRule& operator=(const UsingUpdateRule&) = delete;

 private:
  UpdateRule* saved_;
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

 private:
  int slots_per_variable() const override { return 2; }
  const char* slot_name(int i) const override { return i == 0 ? "m" : "v"; }
  void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) override;
  AdamOptions options_;
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

 private:
  int slots_per_variable() const override { return 1; }
  const char* slot_name(int) const override { return "accumulator"; }
  float slot_initial_value(int) const override { return options_.initial_accumulator_value; }
  void update(Variable& v, const Tensor& g, std::span<Tensor> slots, float lr, int64_t step) override;
  AdagradOptions options_;
};

// "sgd", "adam", "rmsprop", "adagrad" with their Keras defaults.
std::unique_ptr<Optimizer> by_name(const std::string& name);

}  // namespace optimizers
}  // namespace tandem
