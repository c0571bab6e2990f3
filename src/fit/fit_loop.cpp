// fit's loop (fit_loop.h): each epoch's global batches to the strategy's step runner, then the
// metrics, validation and callbacks.
#include "fit/fit_loop.h"

#include <utility>

namespace tandem {

FitLoop::FitLoop(Model& model, const FitOptions& options, int64_t steps, BatchSource next_batch, Validation validation,
                 distribute::BatchAt batch_at)
    : model_(model),
      options_(options),
      steps_(steps),
      next_batch_(std::move(next_batch)),
      batch_at_(std::move(batch_at)),
      validation_(std::move(validation)) {}

History FitLoop::run() {
  distribute::Strategy* strategy = model_.strategy();
  if (strategy->extended().serves()) return serve();
  distribute::set_job_phase(*strategy, "agreement checks");
  // Workers that differ would deadlock or silently train different things: compare first.
  std::string run_text =
      fmt::format("steps per epoch {}, epochs {}, validation {}", steps_, options_.epochs, validation_.text);
  for (const auto& [key, value] : options_.run_config) run_text += fmt::format(", {} {}", key, value);
  distribute::check_workers_agree(*strategy, "the data and settings", run_text);
  // fit's updates add the weights' penalties' gradients (a custom loop adds model.losses itself).
  struct Regularizing {
    Optimizer& optimizer;
    explicit Regularizing(Optimizer& o) : optimizer(o) { optimizer.set_regularizes(true); }
    ~Regularizing() { optimizer.set_regularizes(false); }
  } regularizing(model_.optimizer());
  TrainingPosition start = begin();
  std::string model_text;
  for (const auto& [key, value] : model_.run_signature()) model_text += fmt::format("{}: {}; ", key, value);
  distribute::check_workers_agree(*strategy, "the model, optimizer and batch size", model_text);
  distribute::set_job_phase(*strategy, "training");
  // Only the chief prints progress (the others train the same steps).
  verbose_ = strategy->extended().is_chief() ? options_.verbose : 0;
  if (model_.built()) make_runner();
  for (int epoch = start.epoch; epoch < options_.epochs && !model_.stop_training; ++epoch) {
    if (verbose_ > 0) std::printf("Epoch %d/%d\n", epoch + 1, options_.epochs);
    for (auto& cb : options_.callbacks) cb->on_epoch_begin(epoch, {});
    bar_.emplace(steps_, verbose_, stdout);
    for (Metric& m : model_.running_metrics()) m.reset();
    int64_t first_step = 0;
    if (epoch == start.epoch && start.step > 0) {
      // Resuming mid-epoch: the same permutation (keyed by seed and epoch), the batches already
      // trained skipped, the epoch's running metrics as they were saved.
      first_step = start.step;
      model_.restore_running_metrics();
    }
    end_epoch(epoch, train_epoch(epoch, first_step));
  }
  for (auto& cb : options_.callbacks) cb->on_train_end(logs_);
  for (auto& cb : options_.callbacks) cb->model = nullptr;
  model_.end_run();
  return std::move(history_);
}

// A task that serves the one running fit's loop (a parameter server, a worker handed steps): no
// callbacks, no progress; the model learns its input shape from the data if it must.
History FitLoop::serve() {
  if (!model_.built()) next_batch_(0, 0, false, batch_);
  distribute::StepParts parts = step_parts(false);
  distribute::set_job_phase(*model_.strategy(), "training");
  model_.strategy()->extended().serve(parts);
  return {};
}

TrainingPosition FitLoop::begin() {
  model_.begin_run(options_);
  for (auto& cb : options_.callbacks) cb->model = &model_;
  for (auto& cb : options_.callbacks) cb->on_train_begin({});
  TrainingPosition start{options_.initial_epoch, 0};
  if (model_.resume_from) start = *model_.resume_from;  // a callback restored a backup
  model_.resume_from.reset();
  return start;
}

distribute::StepParts FitLoop::step_parts(bool with_metrics) {
  replicas_ = model_.make_replicas();  // from the current weights and optimizer state
  std::span<Metric> metrics = model_.running_metrics();
  return {.replicas = *replicas_,
          .loss = model_.loss(),
          .optimizer = model_.optimizer(),
          .seed = model_.seed(),
          .metrics = with_metrics ? metrics.subspan(1) : std::span<Metric>(),
          .loss_metric = with_metrics ? &metrics[0] : nullptr,
          .batch_at = batch_at_};
}

void FitLoop::make_runner() { runner_ = model_.strategy()->extended().make_step(step_parts(true)); }

const Logs& FitLoop::current_logs() {
  logs_.clear();
  for (const Metric& m : model_.running_metrics()) logs_.emplace_back(m.name(), m.result());
  if (runner_)
    for (auto& figure : runner_->epoch_figures()) logs_.push_back(std::move(figure));
  return logs_;
}

int64_t FitLoop::train_epoch(int epoch, int64_t first_step) {
  const auto& callbacks = options_.callbacks;
  int64_t step = 0;
  for (; steps_ < 0 || step < steps_; ++step) {
    bool have = next_batch_(epoch, step, runner_ != nullptr && runner_->lazy_batches(), batch_);
    batch_.epoch = epoch;
    batch_.step = step;
    if (!runner_ && have) make_runner();  // the model learnt its input shape from the batch
    if (runner_) runner_->check_batch(have, batch_.rows, epoch, step);
    if (!have) break;
    if (step < first_step) continue;
    for (auto& cb : callbacks) cb->on_batch_begin(step, {});
    std::optional<double> loss = runner_->run(batch_, static_cast<uint64_t>(model_.optimizer().iterations()));
    if (loss) model_.running_metrics()[0].update_mean(*loss, batch_.rows);  // the global batch's loss
    model_.set_position({epoch, step + 1});
    if (bar_->due(step + 1)) bar_->update(step + 1, current_logs());
    if (!callbacks.empty()) {
      current_logs();
      for (auto& cb : callbacks) cb->on_batch_end(step, logs_);
    }
    if (model_.stop_training) return step + 1;  // as Keras: a callback's stop takes effect after the batch
  }
  return step;
}

void FitLoop::end_epoch(int epoch, int64_t steps_done) {
  if (runner_) runner_->finish_epoch();
  model_.set_position({epoch + 1, 0});
  current_logs();
  if (validation_.logs) {
    distribute::JobPhase phase(*model_.strategy(), "validation");
    Logs val = validation_.logs();
    for (const auto& [name, value] : val) logs_.emplace_back("val_" + name, value);
  }
  for (auto& cb : options_.callbacks) cb->on_epoch_logs(epoch, logs_);
  bar_->finish(steps_done, logs_);
  logs_.emplace_back("lr", model_.optimizer().current_learning_rate());
  for (const auto& [name, value] : logs_) history_.history[name].push_back(value);
  history_.epochs.push_back(epoch);
  for (auto& cb : options_.callbacks) cb->on_epoch_end(epoch, logs_);
}

}  // namespace tandem
