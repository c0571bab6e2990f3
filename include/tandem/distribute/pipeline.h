#pragma once
// PipelineStrategy: the model's layers cut into consecutive stages, one per device (CPU core
// groups, one thread group each, as MirroredStrategy's replicas), the horizontal split. Each
// global batch is cut into micro-batches that flow through the stages: a stage runs a
// micro-batch's forward as soon as the stage before hands it the activations, and its backward
// from the gradient the stage after hands back; the gradients add up over the micro-batches and
// every stage applies one optimizer step per global batch, to its own layers. The model trains as
// on one device over the global batch:
//
//   distribute::PipelineStrategy pipeline({.num_stages = 2, .micro_batches = 8});
//   auto scope = pipeline.scope();
//   Sequential model;  ...  model.fit(x, y, {.batch_size = 256});
//
// - Schedules: GPipe (every micro-batch's forward, then every backward: M micro-batches' activations
//   kept) and 1F1B (after S - s - 1 forwards, stage s alternates one forward and one backward: at
//   most S - s micro-batches' activations kept). Both add each stage's gradients in micro-batch
//   order, so they give the same bits.
// - Cut points: given (cuts = the first layer of each stage after the first), or chosen so that the
//   stages' measured costs are as even as contiguous stages allow: each layer timed as the stages
//   run it (M probe micro-batches forward and backward, then its deferred kernel gradient).
//   A model that is a graph (a Functional) is cut only where one tensor crosses from the layers
//   before to those after (between residual blocks: layers::crossing_tensors); a cut given inside
//   a block, or more stages than such places allow, is refused naming the block.
// - Dropout: each row keeps the mask it has on one device (its row in the global batch keys it).
// - Batch normalization: each micro-batch is normalized with its own statistics (ghost batches, as
//   GPipe does: statistics over the global batch would hold every stage behind the slowest
//   micro-batch); the moving statistics move once per global batch, toward the micro-batches'
//   average, as unsynchronized mirrored replicas move theirs. With one micro-batch this is one
//   device exactly; with M, it is mirrored:M.
// - The bubble: each stage's idle share of the step until the last stage has its gradients (time
//   not spent in its forwards, backwards and kernel gradients), in fit's epoch logs as "bubble" (the stages' mean) beside "bubble_ideal",
//   (S - 1) / (M + S - 1); with a timeline, every micro-batch's forward and backward per stage.
//
// The stages hand activations and gradients through a communicator group, and data_replicas
// copies of the pipeline (mirrored:D+pipeline:S) each take their rows of the global batch, every
// stage's gradients summed over its copies. In one process the model's own layers are the first
// copy's stages, and the stages update the model's optimizer's own slots, so that the model
// holds the newest weights whenever fit's loop looks (validation, callbacks, checkpoints).
//
// Over processes (`processes`: S·D of them, one device each; `tandem launch -np S -- tandem fit
// --strategy pipeline:S` makes it over the MPI world): process p is stage p mod S of copy p / S,
// runs the same fit loop on the same data (its batches compared every step), trains and keeps
// the slots of its stage alone; the loss and the metrics come from the last stages to every
// process, every stage's variables go to every process at each epoch's end (validation and
// evaluation run the whole model anywhere), and a checkpoint gathers every stage's variables and
// slots (every process takes part; rank 0 writes). A rank that dies or stops is named by the
// MPI communicator within its timeout.
// Custom loops (Strategy::run) are refused: a stage holds part of the model.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/distribute/strategy.h"
#include "tandem/distribute/strategy_registry.h"
#include "tandem/graph.h"
#include "tandem/optimizers.h"

namespace tandem::distribute {

enum class PipelineSchedule { GPipe, OneForwardOneBackward };

struct PipelineOptions {
  int num_stages = 2;
  int micro_batches = 4;  // per copy of the pipeline and global batch
  PipelineSchedule schedule = PipelineSchedule::OneForwardOneBackward;
  // The index of the first layer of stages 1 .. S-1 (ascending); empty: balanced by measured cost.
  std::vector<int> cuts;
  int threads_per_stage = 1;
  int data_replicas = 1;    // copies of the whole pipeline, each on its rows of the global batch
  int64_t probe_rows = 32;  // the micro-batch each layer's cost is measured on (balanced cuts)
  // One handle per process, each process one device (null: every device a thread of this one).
  std::shared_ptr<Communicator> processes;
  // Each Dense kernel's gradient as one product over the step's rows at the stage's end (after
  // its last backward: work that fills the stages' idle time at the step's end) instead of one
  // per micro-batch (ops::DeferredKernelGradients): the Dense layers' inputs are then kept for
  // every micro-batch until then, beside what the schedule keeps.
  bool defer_kernel_gradients = true;
};

class PipelineExtended : public StrategyExtended {
 public:
  explicit PipelineExtended(PipelineOptions options);
  ~PipelineExtended() override;
  std::string name() const override;
  const PipelineOptions& pipeline_options() const { return options_; }
  // Every device, over every process; this process runs [first, first + local) of them.
  int num_replicas_in_sync() const override { return options_.num_stages * options_.data_replicas; }
  int num_local_replicas() const override { return options_.processes ? 1 : num_replicas_in_sync(); }
  int first_local_replica() const override { return options_.processes ? options_.processes->rank() : 0; }
  Communicator* worker_communicator() override { return options_.processes.get(); }
  bool is_chief() const override { return !options_.processes || options_.processes->rank() == 0; }
  bool collects_state_together() const override { return options_.processes != nullptr; }
  // Over processes: every stage's variables and optimizer slots, from the processes that train them.
  void collect_state(std::vector<std::pair<std::string, Tensor>>& state) override;
  // Over processes: every stage's variables from the process that trains it (collective).
  void share_stages();
  // The cuts in force (the first layer of each stage after the first): given, or chosen when the
  // model's stages were first made; empty before.
  std::vector<int> cuts() const;
  // Stage s's measured share of the step's cost at the cuts chosen (empty when the cuts were given).
  std::vector<double> stage_costs() const;

  // A graph's stage: its part between two cuts where one tensor crosses (layers::graph_part).
  std::shared_ptr<const layers::Graph> replica_graph(const std::vector<std::shared_ptr<layers::Layer>>& layers,
                                                     std::shared_ptr<const layers::Graph> graph,
                                                     int replica) const override;
  std::vector<std::shared_ptr<layers::Layer>> replica_layers(const std::vector<std::shared_ptr<layers::Layer>>& layers,
                                                             int replica) const override;
  GradientReduction gradient_reduction() const override { return {GradientReduction::Kind::None}; }
  int64_t first_row(int) const override { return 0; }
  // None: a stage's layers see their micro-batch alone (batch normalization: ghost batches).
  Communicator* batch_group(int) override { return nullptr; }
  // Device d is stage d mod S of copy d / S; its pipe group holds its copy's stages (rank: the
  // stage), its data group the same stage of every copy (rank: the copy). By local device.
  Communicator& pipe_group(int device) { return *pipe_.at(static_cast<size_t>(device)); }
  Communicator& data_group(int device) { return *data_.at(static_cast<size_t>(device)); }
  // The optimizer whose slots a checkpoint gathers (the model's, set by the step).
  void set_model_optimizer(Optimizer* optimizer) { optimizer_ = optimizer; }
  // This process's devices: a thread group each (device 0: the calling thread), as
  // MirroredStrategy's replicas; their group, of which the pipe and data groups are split.
  ReplicaThreads& devices() { return *threads_; }
  void split_batch(int64_t rows, BatchSplit& split) const override;
  // Refused: the stages run in fit's step alone (on devices()).
  void for_each_replica(const std::function<void(int replica)>& fn) override;
  std::unique_ptr<StepRunner> make_step(const StepParts& parts) override;
  void set_timeline(Timeline* timeline) override;
  // The devices' pipe and data groups made (again, after a failed step: an aborted group is spent).
  void make_groups();

 private:
  // The cuts for this stack (balanced on the first call for a stack, then kept).
  const std::vector<int>& cuts_for(const std::vector<std::shared_ptr<layers::Layer>>& layers) const;
  PipelineOptions options_;
  std::unique_ptr<ReplicaThreads> threads_;  // first made, last gone: after the groups split from it
  mutable std::mutex mutex_;
  mutable std::vector<int> cuts_;
  mutable std::vector<double> costs_;
  mutable const layers::Layer* cut_for_ = nullptr;             // the first layer of the stack the cuts are for
  mutable std::vector<std::shared_ptr<layers::Layer>> whole_;  // the model's stack
  mutable std::shared_ptr<const layers::Graph> graph_;         // how it connects, if a graph
  Optimizer* optimizer_ = nullptr;
  // The stage that trains layer i of the model.
  int stage_of(size_t layer) const;
  std::vector<std::unique_ptr<Communicator>> pipe_, data_;
};

class PipelineStrategy : public StrategyOf<PipelineExtended> {
 public:
  explicit PipelineStrategy(PipelineOptions options)
      : StrategyOf(std::make_unique<PipelineExtended>(std::move(options))) {}
};

// The strategy from its options (strategy_registry.h's make_* say what these add).
std::unique_ptr<Strategy> make_pipeline(PipelineOptions options, const StrategySettings& settings);

}  // namespace tandem::distribute
