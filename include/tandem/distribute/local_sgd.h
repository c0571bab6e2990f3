#pragma once
// LocalSgdStrategy: replicas step alone on their shards of each global batch and average their
// weights every K steps (local SGD: K times less communication than all-reducing every step's
// gradients, at some cost in convergence for large K). Written against the strategy hooks alone:
// no gradient reduction (GradientReduction::Kind::None) and an update rule that applies each
// replica's own gradient to its own copy, then every K-th step of the optimizer averages the
// trainable variables over the replicas. A replica's gradient is its share of the global batch's
// mean (losses are scaled by the global batch, in fit and in custom loops through
// compute_average_loss); the rule scales it by the replica count, which is the mean over its own
// rows when the shares are even. Each replica keeps its own optimizer slots and its own moving
// statistics (only the trainable variables are averaged); the model's own variables are replica 0's.
//   distribute::LocalSgdStrategy local({.num_replicas = 2, .sync_every = 4});
//   auto scope = local.scope();   ...   model.fit(x, y, {.batch_size = 256});
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

struct LocalSgdOptions {
  int num_replicas = 0;         // 0: one per core
  int threads_per_replica = 0;  // 0: usable cores ÷ replicas
  int sync_every = 4;           // K: the weights are averaged after every K-th step
};

class LocalSgdExtended : public StrategyExtended {
 public:
  explicit LocalSgdExtended(LocalSgdOptions options = {});
  ~LocalSgdExtended() override;
  std::string name() const override { return fmt::format("local_sgd:{}:{}", num_replicas_in_sync(), rule_.every); }
  int num_replicas_in_sync() const override;
  int sync_every() const { return rule_.every; }
  GradientReduction gradient_reduction() const override { return {GradientReduction::Kind::None}; }
  UpdateRule& update_rule() const override { return rule_; }

 private:
  static int check(int every) {
    if (every < 1) fail("LocalSgdStrategy: sync_every must be at least 1 step, got {}", every);
    return every;
  }
  struct Rule : UpdateRule {
    explicit Rule(int k) : every(k) {}
    int every;
    // Custom loops: the replica's own gradients, not reduced either.
    void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) override {
      apply_reduced(optimizer, variables, gradients);
    }
    void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                       std::span<const Tensor> gradients) override {
      const ReplicaContext& replica = *replica_context();
      std::vector<Tensor> own;  // the mean over this replica's rows
      auto scale = static_cast<float>(replica.num_replicas);
      for (const Tensor& g : gradients) {
        Tensor c = g.clone();
        float* p = c.data<float>();
        for (int64_t i = 0, n = c.numel(); i < n; ++i) p[i] *= scale;
        own.push_back(c);
      }
      Optimizer& mine = replica.strategy->extended().replica_optimizer(optimizer, replica, variables);
      mine.apply_here(variables, own);
      if (mine.iterations() % every != 0 || replica.num_replicas == 1) return;
      std::vector<Tensor> values;
      for (Variable* v : variables) values.push_back(v->value);
      std::vector<Tensor> mean = replica.all_reduce(ReduceOp::Mean, values);
      for (size_t i = 0; i < variables.size(); ++i) variables[i]->value.copy_from(mean[i]);
    }
  };
  mutable Rule rule_;
  std::unique_ptr<MirroredReplicas> replicas_;  // MirroredStrategy's replicas, one part per replica
};

class LocalSgdStrategy : public StrategyOf<LocalSgdExtended> {
 public:
  explicit LocalSgdStrategy(LocalSgdOptions options = {})
      : StrategyOf(std::make_unique<LocalSgdExtended>(std::move(options))) {}
};

}  // namespace tandem::distribute
