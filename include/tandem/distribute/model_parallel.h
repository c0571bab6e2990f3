#pragma once
// ModelParallelStrategy: the model's Dense layers split over N devices (CPU core groups: one
// thread group each, as MirroredStrategy's replicas), the tutorial's vertical split. Consecutive
// Dense layers pair as Megatron-LM pairs them: the first split by columns (each device computes
// its slice of the units; elementwise layers between, activations and dropout, stay split), the
// second by rows (each multiplies its slice of the features by its rows of the kernel, and the
// partial sums are summed over the devices): one sum over the group forward and one backward per
// pair. A Dense layer with no partner is split by columns and its output gathered; other layers
// run whole on every device (said on standard error where they hold variables: Conv2D, batch
// normalization). A graph (a Functional) keeps its connections: each Dense split by columns, its
// output gathered. Every device computes the whole batch: the split is of the model.
//
//   distribute::ModelParallelStrategy split(2);
//   auto scope = split.scope();
//   Sequential model;  ...  model.fit(x, y, {.batch_size = 256});
//
// Each device keeps its slices of the variables and of the optimizer's slots while it trains; the
// model's own variables get the whole values at each epoch's end (validation, callbacks) and
// after each run() of a custom loop, and hold between fits and steps (what is written to them
// counts); checkpoints are whole, as one device writes them: a split run resumes unsplit and
// back. In a custom loop, run() runs the step on every device with the same batch (pass it by
// capture) and returns each device's (equal) result.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/distribute/strategy.h"
#include "tandem/distribute/strategy_registry.h"

namespace tandem::distribute {

struct ModelParallelOptions {
  int num_shards = 2;
  int threads_per_shard = 1;
  // Data × model: this many copies of the split model (num_shards devices each, num_shards ×
  // data_replicas in all), each computing its rows of the global batch (rows [B·d/D, B·(d+1)/D)
  // to copy d); every device's gradients are summed over the copies of its piece (its data group),
  // never over the pieces of one layer (its tensor group). In fit; custom loops take one copy.
  int data_replicas = 1;
  // Split every Dense layer the plan can pair (true), or only those made with {.shards = N}.
  bool auto_split = true;
  // Each device's memory for the model's variables and the optimizer's slots (0: no limit): a
  // model that needs more on one device is refused before training, with what it needs.
  int64_t device_memory_bytes = 0;
  // One handle per process, each process one device (`tandem launch -np T·D -- tandem fit
  // --strategy model-parallel:T`): device p is process p. Every process reads the same batches
  // (compared every step); the metrics come from each copy's first piece; whole variables and
  // slots are gathered over a copy's processes (epoch ends; checkpoints, where every process takes
  // part). Null: every device a thread of this process.
  std::shared_ptr<Communicator> processes;
};

class ModelParallelExtended : public StrategyExtended {
 public:
  explicit ModelParallelExtended(ModelParallelOptions options);
  ~ModelParallelExtended() override;
  std::string name() const override;
  int num_shards() const { return options_.num_shards; }
  int num_replicas_in_sync() const override { return options_.num_shards * options_.data_replicas; }
  int num_local_replicas() const override { return options_.processes ? 1 : num_replicas_in_sync(); }
  int first_local_replica() const override { return options_.processes ? options_.processes->rank() : 0; }
  Communicator* worker_communicator() override { return options_.processes.get(); }
  bool is_chief() const override { return !options_.processes || options_.processes->rank() == 0; }
  bool collects_state_together() const override { return options_.processes != nullptr; }
  const ModelParallelOptions& model_parallel_options() const { return options_; }

  // A graph (a Functional) runs as it is on every device, its Dense layers split by columns, each
  // output gathered whole (no pairs: a sliced activation would have to reach only its partner).
  std::shared_ptr<const layers::Graph> replica_graph(const std::vector<std::shared_ptr<layers::Layer>>& layers,
                                                     std::shared_ptr<const layers::Graph> graph,
                                                     int replica) const override;
  // How the last model's layers were split, one entry per layer with variables: "columns",
  // "columns, gathered", "rows" or "whole" (computed whole on every device: Conv2D, batch
  // normalization, a Dense too narrow or not asked to split). fit's first step says which stay
  // whole on standard error.
  std::vector<std::pair<std::string, std::string>> plan() const;
  std::vector<std::shared_ptr<layers::Layer>> replica_layers(const std::vector<std::shared_ptr<layers::Layer>>& layers,
                                                             int replica) const override;
  GradientReduction gradient_reduction() const override { return {GradientReduction::Kind::None}; }
  int64_t first_row(int) const override { return 0; }  // every device computes its copy's whole batch
  // The mesh: device r is piece r mod num_shards of copy r / num_shards. Its tensor group holds the
  // pieces of its copy (the split layers' collectives); its data group, the same piece of every
  // copy (its gradients' sum; the batch's group, null with one copy). By local device.
  Communicator& tensor_group(int device) { return *tensor_.at(static_cast<size_t>(device)); }
  Communicator* batch_group(int device) override {
    return options_.data_replicas > 1 ? data_.at(static_cast<size_t>(device)).get() : nullptr;
  }
  UpdateRule& update_rule() const override;
  // This process's devices: a thread group each (device 0: the calling thread), as
  // MirroredStrategy's replicas; their group, of which the tensor and data groups are split.
  ReplicaThreads& devices() { return *threads_; }
  // fit's runner feeds every device its copy's whole batch itself; this even split only numbers
  // the rows. A custom loop's devices each take their copy's rows whole (replica_rows).
  void split_batch(int64_t rows, BatchSplit& split) const override;
  std::pair<int64_t, int64_t> replica_rows(int64_t rows, int device) const override;
  // The devices run fn, between cutting their pieces from the whole model and writing them back
  // into it (a custom loop's step; fit's step runs devices() and keeps the pieces until the
  // epoch ends).
  void for_each_replica(const std::function<void(int replica)>& fn) override;
  std::unique_ptr<StepRunner> make_step(const StepParts& parts) override;
  // Also the devices' group collectives record their spans ("all_reduce", "all_gather").
  void set_timeline(Timeline* timeline) override;
  // Checkpoints: the variables and the optimizer's slots gathered whole from the devices.
  void collect_state(std::vector<std::pair<std::string, Tensor>>& state) override;

  struct Shards;  // the devices' layers and optimizers (src/distribute/model_parallel/shards.h)
  Shards& shards() { return *shards_; }

 private:
  ModelParallelOptions options_;
  std::unique_ptr<ReplicaThreads> threads_;  // first made, last gone: after the groups split from it
  std::unique_ptr<Shards> shards_;
  std::vector<std::unique_ptr<Communicator>> tensor_, data_;
  mutable std::mutex plan_mutex_;
  mutable std::shared_ptr<const layers::Graph> graph_;             // the model's, if a graph
  mutable std::vector<std::pair<std::string, std::string>> plan_;  // as plan() says
};

class ModelParallelStrategy : public StrategyOf<ModelParallelExtended> {
 public:
  explicit ModelParallelStrategy(int num_shards)
      : ModelParallelStrategy(ModelParallelOptions{.num_shards = num_shards}) {}
  explicit ModelParallelStrategy(ModelParallelOptions options)
      : StrategyOf(std::make_unique<ModelParallelExtended>(std::move(options))) {}
};

// The settings fit's flags give model parallelism (StrategySettings::of): each device's memory
// for the variables and slots (0: no limit).
struct ModelParallelSettings {
  int64_t device_memory_bytes = 0;
};
// The strategy from its options (strategy_registry.h's make_* say what these add).
std::unique_ptr<Strategy> make_model_parallel(ModelParallelOptions options, const StrategySettings& settings);

}  // namespace tandem::distribute
