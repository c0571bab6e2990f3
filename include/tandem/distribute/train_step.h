#pragma once
// One training step, the one every path runs (Sequential::fit on arrays or on a Dataset, under
// the default strategy or any other): the global batch split into parts as the strategy says
// (Strategy::split_batch), each replica's forward and backward on its parts, its gradients
// reduced by the strategy's policy (Strategy::gradient_reduction), and the update applied by
// the strategy's rule (Strategy::update_rule). Keras' Model.train_step, run by the strategy.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/autograd.h"
#include "tandem/distribute/strategy.h"
#include "tandem/layers.h"
#include "tandem/losses.h"
#include "tandem/optimizers.h"
#include "tandem/tensor.h"

namespace tandem::distribute {

// A global batch: whole tensors, or its row count and a way to copy rows [begin, end) of it, so
// that each replica copies only its own rows.
struct GlobalBatch {
  using Gather = std::function<void(int64_t begin, int64_t end, Tensor& x, Tensor& y)>;
  Tensor x, y;
  int64_t rows = 0;
  Gather gather;  // used when x is undefined
  void slice(int64_t begin, int64_t end, Tensor& xs, Tensor& ys) const;
};

// The replicas of a stack of layers: replica 0 is the stack itself, the others are where the
// strategy's replica_layer puts them (their own copies, or sharing the variables). Made from the
// current weights; a null strategy has the one replica.
class ModelReplicas {
 public:
  struct Replica {
    std::vector<std::shared_ptr<layers::Layer>> layers;
    std::vector<Variable*> variables, trainable;
    uint64_t training_calls = 0;  // inside Strategy::run: keys each training call's dropout
  };
  ModelReplicas(Strategy* strategy, const std::vector<std::shared_ptr<layers::Layer>>& layers);
  int size() const { return static_cast<int>(replicas_.size()); }
  Replica& operator[](int r) { return replicas_[static_cast<size_t>(r)]; }

 private:
  std::vector<Replica> replicas_;
};

// What a step gives back for the metrics: the mean per-sample loss over the global batch, and
// each part's predictions and targets in part order (undefined for a part with no rows).
struct StepResult {
  double loss = 0.0;
  std::vector<Tensor> predictions, labels;
  std::vector<double> summed;  // what add_local_sums appended, summed over the processes
};

// The step for one model under one strategy (null: the default strategy, one replica on this
// thread); it keeps its tapes, gradients and buffers from one step to the next.
class TrainStep {
 public:
  TrainStep(Strategy* strategy, ModelReplicas& replicas, const Loss& loss, Optimizer& optimizer, uint64_t seed);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;
  // Whether `strategy` splits batches (more than one part): then each replica copies its own rows.
  static bool splits(const Strategy* strategy);
  // One step on `batch`; `key` keys the step's dropout masks (the optimizer's iteration).
  const StepResult& run(const GlobalBatch& batch, uint64_t key);
  // With several processes (Strategy::worker_communicator), each process has the predictions of
  // its own parts only. This appends values of its own (fit's metric counts) to be summed over
  // the processes in the step's one exchange, with the parts' losses; the sums land in
  // StepResult::summed.
  std::function<void(const StepResult& local, std::vector<double>& values)> add_local_sums;

 private:
  struct ReplicaState;  // one replica's tape, reducer and gradients (replica_state.h)
  void check_split(int64_t rows) const;
  int global_replica(int r) const;  // local replica r's index among every process's
  void run_replica(int r);
  // Part p on its own tape: forward, loss (summed over its rows ÷ the global batch), backward.
  void compute_part(ReplicaState& work, int r, int p);
  // The replica's parts layer by layer on one tape, for layers that need them together (their
  // statistics over the global batch); each part's gradients stay apart through aliases.
  void compute_parts_together(ReplicaState& work, int r);
  // Every part's values for a layer that needs the whole global batch, in part order.
  std::vector<double> gather_part_values(int r, std::span<const double> values, size_t per_part,
                                         const std::vector<int>& live);
  Strategy* strategy_;
  ModelReplicas& replicas_;
  const Loss& loss_;
  Optimizer& optimizer_;
  uint64_t seed_;
  GradientReduction reduction_;
  bool together_ = false;
  BatchSplit split_;
  const GlobalBatch* batch_ = nullptr;  // of the step running
  uint64_t key_ = 0;
  std::function<void(int)> replica_job_;
  std::vector<std::unique_ptr<ReplicaState>> work_;  // per replica
  std::vector<double> part_losses_;                  // per part, summed in part order
  std::vector<double> exchange_;                     // part losses and add_local_sums's values
  StepResult result_;
};

}  // namespace tandem::distribute
