#pragma once
// What the step runners of strategies whose devices each hold part of one model share (the copies
// of a split model, the stages of a pipeline): the step's parts, this process's first device and
// the processes' group; every process reads the same batches, whole (compared every step over
// processes); fit's loss and metrics come from the parts that computed predictions (a copy's first
// device, a pipeline's last stages), and over processes what each added is summed
// (summed_metrics.h).
#include <optional>
#include <span>
#include <vector>

#include "distribute/summed_metrics.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/distribute/strategy.h"
#include "tandem/distribute/train_step.h"
#include "tandem/ops.h"

namespace tandem::distribute {

class DeviceStep : public StepRunner {
 public:
  DeviceStep(StrategyExtended& strategy, const StepParts& parts)
      : replicas_(parts.replicas),
        loss_(parts.loss),
        optimizer_(parts.optimizer),
        seed_(parts.seed),
        metrics_(parts.metrics),
        first_(strategy.first_local_replica()),
        processes_(strategy.worker_communicator()),
        owner_(strategy) {}
  bool lazy_batches() const override { return false; }
  void check_batch(bool have, int64_t rows, int epoch, int64_t step) override {
    if (processes_ != nullptr) check_same_batch(owner_.name(), *processes_, have, rows, epoch, step, batch_sizes_);
  }

 protected:
  // The global batch, whole.
  static void whole_batch(const GlobalBatch& batch, Tensor& x, Tensor& y) {
    x = batch.x;
    y = batch.y;
    if (!x.defined()) batch.slice(0, batch.rows, x, y);
  }
  // What a part of the step that computed predictions reports: its rows' labels, its predictions
  // and its summed loss.
  struct Reported {
    Tensor labels, predictions;
    double loss_sum = 0.0;
  };
  // The regularizer penalties of the trainable variables this process's devices hold of the
  // model's first copy (`first_copy(d)`: whether local device d holds a piece of it), read before
  // the step updates them; report() adds them, summed over the processes, to the step's loss.
  template <class FirstCopy>
  double copy_penalty(int devices, const FirstCopy& first_copy) {
    StopRecording no_tape;
    double total = 0.0;
    for (int d = 0; d < devices; ++d)
      if (first_copy(d))
        if (Tensor p = ops::penalties(replicas_[d].trainable); p.defined()) total += static_cast<double>(p.item());
    return total;
  }
  // Fit's metrics updated from this process's parts (part(i) for i < parts: nothing where the part
  // had no rows or is another process's), summed over the processes; the global batch's mean loss
  // plus the penalties (copy_penalty's, this process's share).
  template <class Part>
  double report(int parts, int64_t rows, const Part& part, double penalty = 0.0) {
    double loss = penalty * static_cast<double>(rows);
    summed_.start(metrics_);
    for (int i = 0; i < parts; ++i) {
      std::optional<Reported> r = part(i);
      if (!r) continue;
      loss += r->loss_sum;
      for (Metric& m : metrics_) m.update(r->labels, r->predictions);
    }
    return summed_.finish(processes_, metrics_, loss) / static_cast<double>(rows);
  }

  ModelReplicas& replicas_;
  const Loss& loss_;
  Optimizer& optimizer_;
  uint64_t seed_;
  std::span<Metric> metrics_;
  int first_;                // this process's first device
  Communicator* processes_;  // over processes: their group; else null

 private:
  const StrategyExtended& owner_;
  std::vector<int64_t> batch_sizes_;
  SummedMetrics summed_;
};

}  // namespace tandem::distribute
