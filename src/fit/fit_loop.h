#pragma once
// fit's loop (Keras' Model.fit): epochs of global batches handed to the runner the model's
// strategy makes (StrategyExtended::make_step), the running metrics, validation, callbacks, the progress
// bar and the history. How a step runs is the strategy's; this loop only feeds and reports.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "fit/progress.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/model.h"

namespace tandem {

class FitLoop {
 public:
  // Fills the batch with batch `step` of epoch `epoch` (called for every step in order); false
  // when the epoch has no more batches. `lazy`: rows may be left to GlobalBatch::gather.
  using BatchSource = std::function<bool(int epoch, int64_t step, bool lazy, distribute::GlobalBatch& batch)>;
  // Validation at each epoch's end: its logs (empty: none) and what the workers compare of it.
  struct Validation {
    std::function<Logs()> logs;
    std::string text;
  };
  // steps: per epoch (-1: until the source runs out); batch_at: the same batches by position,
  // where the source allows it.
  FitLoop(Model& model, const FitOptions& options, int64_t steps, BatchSource next_batch, Validation validation,
          distribute::BatchAt batch_at = nullptr);
  History run();

 private:
  History serve();
  // The run's signature, the metrics, on_train_begin; where training starts (a restored backup's position).
  TrainingPosition begin();
  // The model's replicas made anew (from the current weights and optimizer state), kept in
  // replicas_, and what a step runner is made of (fit's running metrics, or none for a task
  // that serves).
  distribute::StepParts step_parts(bool with_metrics);
  // The strategy's runner, from step_parts.
  void make_runner();
  // Epoch `epoch` from batch first_step on: the batches it ended after.
  int64_t train_epoch(int epoch, int64_t first_step);
  // Validation, the epoch's logs into the history, on_epoch_end.
  void end_epoch(int epoch, int64_t steps_done);
  const Logs& current_logs();  // the running metrics

  Model& model_;
  const FitOptions& options_;
  int64_t steps_;
  BatchSource next_batch_;
  distribute::BatchAt batch_at_;
  Validation validation_;
  int verbose_ = 0;
  // Made at the first batch the model is built for (it may learn its input shape from it), kept
  // for the whole fit.
  std::shared_ptr<distribute::ModelReplicas> replicas_;
  std::unique_ptr<distribute::StepRunner> runner_;
  distribute::GlobalBatch batch_;
  std::optional<train::ProgressBar> bar_;
  Logs logs_;
  History history_;
};

}  // namespace tandem
