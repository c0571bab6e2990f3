// fit's step under ModelParallelStrategy: every device runs its copy's rows of the global batch (all
// of them with one copy) through its stack (its slices of the split layers, its copies of the
// others), its backward and its update; the split layers' collectives keep the pieces of a copy
// together, the update rule sums the copies' gradients. Each copy's first device's loss and
// predictions go to fit's metrics (the pieces of a copy compute the same). At each epoch's end the model's variables and
// its optimizer's slots are made whole again, for validation, callbacks and checkpoints.
#include <exception>
#include <optional>

#include "distribute/device_step.h"
#include "distribute/model_parallel/shards.h"
#include "distribute/replica_threads.h"
#include "distribute/step_body.h"
#include "tandem/autograd.h"
#include "tandem/devices.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/distribute/train_step.h"
#include "tandem/timeline.h"

namespace tandem::distribute {
namespace {

class TensorParallelStep : public DeviceStep {
 public:
  TensorParallelStep(ModelParallelExtended& strategy, const StepParts& parts)
      : DeviceStep(strategy, parts), strategy_(strategy) {
    for (int d = 0; d < replicas_.size(); ++d) device_names_.push_back(fmt::format("device {}", first_ + d));
  }

  std::optional<double> run(const GlobalBatch& batch, uint64_t key) override {
    Tensor x, y;
    whole_batch(batch, x, y);
    const ModelParallelOptions& mesh = strategy_.model_parallel_options();
    int pieces = mesh.num_shards, copies = mesh.data_replicas;
    int64_t rows = x.dim(0);
    std::vector<double> sums(static_cast<size_t>(copies), 0.0);
    std::vector<Tensor> predictions(static_cast<size_t>(copies));
    if (strategy_.shards().whole_holds()) strategy_.shards().reslice();
    double penalty = copy_penalty(replicas_.size(), [&](int d) { return first_ + d < pieces; });
    Timeline* timeline = strategy_.timeline();
    strategy_.devices().run([&](int d) {  // the devices hold until the epoch ends
      ModelReplicas::Replica& device = replicas_[d];
      const char* row = device_names_[static_cast<size_t>(d)].c_str();
      int g = first_ + d, copy = g / pieces;
      int64_t begin = rows * copy / copies, end = rows * (copy + 1) / copies;  // this copy's rows
      std::vector<Tensor> grads;
      if (begin == end) {  // no rows for this copy: zeros to the sums over the copies
        for (Variable* v : device.trainable) grads.push_back(Tensor::zeros(v->value.shape()));
      } else {
        bool whole = begin == 0 && end == rows;
        GradientTape tape;
        std::vector<Tensor> sources;
        for (Variable* v : device.trainable) sources.push_back(v->value);
        grads.resize(sources.size());
        RowsForward step =
            train_rows(tape, device.network(), loss_, whole ? x : x.slice(begin, end), whole ? y : y.slice(begin, end),
                       {seed_, key, begin, rows, nullptr, nullptr, batch.weights_of(begin, end)}, {sources, grads},
                       {timeline, row});
        if (g % pieces == 0) {  // each copy's first piece speaks for it
          sums[static_cast<size_t>(copy)] = ops::sum(step.loss.per_sample).item();
          predictions[static_cast<size_t>(copy)] = step.predictions;
        }
      }
      Timeline::Span update(timeline, "update", row);
      optimizer_.apply(device.trainable, grads);
    });
    return report(
        copies, rows,
        [&](int c) -> std::optional<Reported> {
          int64_t begin = rows * c / copies, end = rows * (c + 1) / copies;
          if (begin == end || !predictions[static_cast<size_t>(c)].defined())
            return {};  // no rows, or another process's
          return Reported{copies == 1 ? y : y.slice(begin, end), predictions[static_cast<size_t>(c)],
                          sums[static_cast<size_t>(c)]};
        },
        penalty);
  }

  void finish_epoch() override { strategy_.shards().write_back(&optimizer_); }

  // fit's end: the whole model holds (its last epoch's end wrote it, then callbacks may change
  // it; a fit failing mid-epoch writes the devices' newest values into it first).
  ~TensorParallelStep() override {
    try {  // over processes the others may not be there to gather with: the last epoch's end holds
      if (std::uncaught_exceptions() > 0 && processes_ == nullptr) strategy_.shards().write_back(&optimizer_);
    } catch (const std::exception&) {  // the failure already on its way says what went wrong
    }
    strategy_.shards().hand_to_model();
  }

 private:
  ModelParallelExtended& strategy_;
  std::vector<std::string> device_names_;  // the timeline's rows
};

}  // namespace

std::unique_ptr<StepRunner> ModelParallelExtended::make_step(const StepParts& parts) {
  if (options_.device_memory_bytes > 0) {
    int slots = parts.optimizer.slots_per_variable();
    int64_t needs = shards_->bytes_per_device(slots), limit = options_.device_memory_bytes;
    if (needs > limit)
      fail(
          "{}: the model needs {} on a device (its variables and {} optimizer slot{} per trainable one, split over {} "
          "device{}), more than the {} each device has; split it over more devices (model-parallel:N) or give them "
          "more memory",
          name(), memory_size(needs), slots, slots == 1 ? "" : "s", options_.num_shards,
          options_.num_shards == 1 ? "" : "s", memory_size(limit));
  }
  return std::make_unique<TensorParallelStep>(*this, parts);
}

}  // namespace tandem::distribute
