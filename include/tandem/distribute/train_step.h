#pragma once
// The synchronous data-parallel step, the runner StrategyExtended::make_step makes unless a strategy
// makes its own (Sequential::fit on arrays or on a Dataset, under the default strategy or any
// data-parallel one): the global batch split into parts as the strategy says
// (StrategyExtended::split_batch), each replica's forward and backward on its parts, its gradients
// reduced by the strategy's policy (StrategyExtended::gradient_reduction), and the update applied by
// the strategy's rule (StrategyExtended::update_rule). Keras' Model.train_step, run by the strategy.
// Over several processes it also checks that every worker has the same global batch and sums
// the losses and metric counts over them.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/autograd.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/distribute/strategy.h"
#include "tandem/graph.h"
#include "tandem/layers.h"
#include "tandem/losses.h"
#include "tandem/optimizers.h"
#include "tandem/tensor.h"

namespace tandem::distribute {

// The replicas of a model's layers: replica 0 is the layers themselves, the others are where the
// strategy's replica_layers puts them (their own copies, or sharing the variables). Made from the
// current weights. A graph (a Functional's; null: a chain) connects each replica's layers alike.
class ModelReplicas {
 public:
  struct Replica {
    std::vector<std::shared_ptr<layers::Layer>> layers;
    std::shared_ptr<const layers::Graph> graph;
    layers::Network network() const { return {layers, graph.get()}; }
    std::vector<Variable*> variables, trainable;
    uint64_t training_calls = 0;          // inside Strategy::run: keys each training call's dropout
    std::vector<Tensor> activity_losses;  // inside Strategy::run: the last call's activity penalties, per row
  };
  ModelReplicas(const StrategyExtended& strategy, const std::vector<std::shared_ptr<layers::Layer>>& layers,
                std::shared_ptr<const layers::Graph> graph = nullptr);
  int size() const { return static_cast<int>(replicas_.size()); }
  Replica& operator[](int r) { return replicas_[static_cast<size_t>(r)]; }

 private:
  std::vector<Replica> replicas_;
};

// Every worker takes its rows of the same global batches: a worker whose data ran out, or whose
// batch has another size, would leave the others waiting or train on something else. Collective
// over `workers`; a mismatch is named (`scratch`: kept by the caller, as this runs every step).
void check_same_batch(const std::string& strategy, Communicator& workers, bool have, int64_t rows, int epoch,
                      int64_t step, std::vector<int64_t>& scratch);

// The step for one model under one strategy; it keeps its tapes, gradients and buffers from one
// step to the next.
class TrainStep : public StepRunner {
 public:
  TrainStep(StrategyExtended& strategy, const StepParts& parts);
  ~TrainStep() override;
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;
  // More than one part: each replica copies its own rows.
  bool lazy_batches() const override;
  // Every worker takes its rows of the same global batches: a worker whose data ran out, or whose
  // batch has another size, would leave the others waiting or train on something else. Named.
  void check_batch(bool have, int64_t rows, int epoch, int64_t step) override;
  std::optional<double> run(const GlobalBatch& batch, uint64_t key) override;

 private:
  // Each part's predictions and targets in part order (undefined for a part with no rows).
  struct PartOutputs {
    std::vector<Tensor> predictions, labels;
  };
  // The metrics from the parts this process computed; with several processes, what each added
  // (counts and sums, exact) is summed over them in the step's one exchange, with the losses.
  void update_metrics();
  struct ReplicaState;  // one replica's tape, reducer and gradients (replica_state.h)
  void check_split(int64_t rows) const;
  int global_replica(int r) const;  // local replica r's index among every process's
  void run_replica(int r);
  // Part p on its own tape: forward, loss (summed over its rows ÷ the global batch), backward.
  void compute_part(ReplicaState& work, int r, int p);
  // The replica's parts layer by layer on one tape, for layers that need them together (their
  // statistics over the global batch); each part's gradients stay apart through aliases.
  void compute_parts_together(ReplicaState& work, int r);
  // The replica's parts as one batch, for models whose layers compute each row alone (under
  // ops::RowExactProducts, a row's bits are the same as in its part alone); the Dense kernels' and
  // biases' gradients, which sum over rows, still taken part by part.
  void compute_parts_stacked(ReplicaState& work, int r);
  // Every part's values for a layer that needs the whole global batch, in part order.
  std::vector<double> gather_part_values(int r, std::span<const double> values, size_t per_part,
                                         const std::vector<int>& live);
  StrategyExtended* strategy_;
  ModelReplicas& replicas_;
  const Loss& loss_;
  Optimizer& optimizer_;
  uint64_t seed_;
  std::span<Metric> metrics_;
  Communicator* workers_;  // null: this process alone
  GradientReduction reduction_;
  bool together_ = false;
  bool stacked_ = false;
  // Ordered policy: Dense's float32 products row-exact on every path (ops::RowExactProducts), so the
  // bits depend on no library's blocking for the vector level (AVX2 or AVX-512) either.
  bool exact_products_ = false;
  BatchSplit split_;
  const GlobalBatch* batch_ = nullptr;  // of the step running
  uint64_t key_ = 0;
  std::function<void(int)> replica_job_;
  std::vector<std::unique_ptr<ReplicaState>> work_;  // per replica
  std::vector<double> part_losses_;                  // per part, summed in part order
  // A part's loss as its replica left it (on its device), read into part_losses_ once every
  // replica has queued its update: a GPU's step waits for its loss only after the update is queued.
  std::vector<Tensor> part_loss_values_;
  std::vector<double> part_loss_scales_;
  std::vector<double> exchange_;      // part losses and the metrics' sums and counts
  std::vector<double> metric_sums_;   // the metrics' accumulators before the step
  std::vector<int64_t> batch_sizes_;  // every worker's (has a batch, rows)
  PartOutputs result_;
};

}  // namespace tandem::distribute
