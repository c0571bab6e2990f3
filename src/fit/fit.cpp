// compile / fit / evaluate / predict. fit's loop feeds each global batch to the training step
// (distribute::TrainStep, the one every strategy runs) and keeps the metrics and callbacks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "fit/progress.h"
#include "tandem/model.h"
#include "tandem/random.h"

namespace tandem {
namespace {

// Copies rows `index[begin..end)` of `src` (samples on axis 0) into a new batch tensor.
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& index, int64_t begin, int64_t end) {
  Shape shape = src.shape();
  shape[0] = end - begin;
  Tensor out = Tensor::empty(shape, src.dtype());
  size_t row_bytes = static_cast<size_t>(src.numel() / std::max<int64_t>(src.dim(0), 1)) * dtype_size(src.dtype());
  const auto* from = static_cast<const char*>(src.raw());
  auto* to = static_cast<char*>(out.raw());
  for (int64_t i = begin; i < end; ++i)
    std::memcpy(to + static_cast<size_t>(i - begin) * row_bytes,
                from + static_cast<size_t>(index[static_cast<size_t>(i)]) * row_bytes, row_bytes);
  // Shuffled rows come from anywhere in the dataset, so they miss the caches: ask for the next
  // batch's rows now, and they arrive while this step computes.
  int64_t next_end = std::min<int64_t>(static_cast<int64_t>(index.size()), end + (end - begin));
  for (int64_t i = end; i < next_end; ++i) {
    const char* row = from + static_cast<size_t>(index[static_cast<size_t>(i)]) * row_bytes;
    for (size_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(row + off, 0, 2);
  }
  return out;
}

// Fisher-Yates driven by Philox(seed, epoch): the order depends only on seed and epoch.
void shuffle(std::vector<int64_t>& index, uint64_t seed, int epoch) {
  std::iota(index.begin(), index.end(), 0);
  Philox rng(mix_seed(seed, 0x5f1e), static_cast<uint64_t>(epoch));
  for (size_t i = index.size(); i > 1; --i) {
    uint64_t r = (uint64_t{rng.bits(2 * i)} << 32) | rng.bits(2 * i + 1);
    std::swap(index[i - 1], index[r % i]);
  }
}

}  // namespace

void Sequential::compile(const std::string& optimizer, Loss loss, std::vector<std::string> metrics) {
  compile(optimizers::by_name(optimizer), std::move(loss), std::move(metrics));
}

void Sequential::compile(std::unique_ptr<Optimizer> optimizer, Loss loss, std::vector<std::string> metrics) {
  if (!optimizer) fail("compile: optimizer is null");
  for (const std::string& m : metrics) Metric::parse(m, loss);  // rejects unknown names now, not mid-fit
  optimizer_ = std::move(optimizer);
  loss_ = std::move(loss);
  metric_names_ = std::move(metrics);
}

Optimizer& Sequential::optimizer() {
  check_compiled("optimizer");
  return *optimizer_;
}

const Loss& Sequential::loss() const {
  check_compiled("loss");
  return *loss_;
}

void Sequential::check_compiled(const char* what) const {
  if (!optimizer_)
    fail("Sequential \"{}\": {} needs a compiled model; call compile(optimizer, loss, metrics) first", name_, what);
}

void Sequential::check_data(const Tensor& x, const Tensor& y, const char* what) {
  if (!x.defined()) fail("{}: x is undefined", what);
  if (x.dtype() != DType::Float32)
    fail("{}: x must be float32, got {} (convert with astype(DType::Float32) and scale it)", what,
         dtype_name(x.dtype()));
  if (x.rank() < 2) fail("{}: x must have a sample axis and features, got shape {}", what, x.shape().str());
  if (x.dim(0) == 0) fail("{}: x is empty (0 samples)", what);
  if (y.defined() && y.rank() >= 1 && y.dim(0) != x.dim(0))
    fail("{}: x has {} samples but y has {}", what, x.dim(0), y.dim(0));
  if (y.defined() && y.rank() == 0) fail("{}: y must have a sample axis, got a scalar", what);
  Shape per_sample(std::span<const int64_t>(x.shape().begin() + 1, x.shape().end()));
  if (!built()) build(per_sample);
  const Shape& expected = layers_.front()->input_shape();
  if (!(per_sample == expected))
    fail("{}: x has samples of shape {}, the model expects {}", what, per_sample.str(), expected.str());
  if (y.defined() && loss_) loss_->check_targets(y, layers_.back()->output_shape());
}

History Sequential::fit(const Tensor& x_all, const Tensor& y_all, const FitOptions& options) {
  check_compiled("fit");
  if (options.batch_size <= 0) fail("fit: batch_size must be positive, got {}", options.batch_size);
  if (options.epochs < 0) fail("fit: epochs must be non-negative, got {}", options.epochs);
  if (!(options.validation_split >= 0.0 && options.validation_split < 1.0))
    fail("fit: validation_split must be in [0, 1), got {}", options.validation_split);
  if (options.verbose < 0 || options.verbose > 2) fail("fit: verbose must be 0, 1 or 2, got {}", options.verbose);
  if (!y_all.defined()) fail("fit: y is undefined");
  check_data(x_all, y_all, "fit");

  bool sparse = loss_->kind() == Loss::Kind::SparseCategoricalCrossentropy;
  Tensor y_cast = sparse && y_all.dtype() != DType::Int32 ? y_all.astype(DType::Int32) : y_all.contiguous();
  if (!sparse && y_cast.dtype() != DType::Float32) y_cast = y_cast.astype(DType::Float32);
  Tensor x_c = x_all.contiguous();
  if (sparse) y_cast = y_cast.reshape({y_cast.dim(0)});

  int64_t n = x_c.dim(0);
  Tensor x = x_c, y = y_cast, x_val, y_val;
  if (options.validation_data) {
    x_val = options.validation_data->first;
    y_val = options.validation_data->second;
    check_data(x_val, y_val, "fit (validation_data)");
  } else if (options.validation_split > 0.0) {
    auto held = static_cast<int64_t>(std::floor(static_cast<double>(n) * options.validation_split));
    if (held == 0 || held == n)
      fail("fit: validation_split {} of {} samples leaves {} for validation and {} for training",
           options.validation_split, n, held, n - held);
    x = x_c.slice(0, n - held);
    y = y_cast.slice(0, n - held);
    x_val = x_c.slice(n - held, n);
    y_val = y_cast.slice(n - held, n);
  }
  int64_t rows = x.dim(0), batch = options.batch_size;
  int64_t steps = (rows + batch - 1) / batch;

  std::vector<int64_t> index(static_cast<size_t>(rows));
  std::iota(index.begin(), index.end(), 0);
  int64_t first_row = 0;  // of the current batch, in `index`
  auto gather = [&](int64_t b, int64_t e, Tensor& xs, Tensor& ys) {
    xs = gather_rows(x, index, first_row + b, first_row + e);
    ys = gather_rows(y, index, first_row + b, first_row + e);
  };
  auto batches = [&](int epoch, int64_t step, bool lazy, distribute::GlobalBatch& out) {
    if (step == 0 && options.shuffle) shuffle(index, seed_, epoch);
    if (step == 0 && !options.shuffle) std::iota(index.begin(), index.end(), 0);
    first_row = step * batch;
    out.rows = std::min(rows, first_row + batch) - first_row;
    if (!out.gather) out.gather = gather;
    if (!lazy) gather(0, out.rows, out.x, out.y);  // else each replica gathers its rows
    return true;
  };
  return train_loop(options, steps, batches, x_val, y_val);
}

// What fit keeps while it trains: its arguments, the step, the batch and the epoch's logs.
struct Sequential::TrainingRun {
  const FitOptions& options;
  int64_t steps;  // per epoch; -1: until the source runs out
  const BatchSource& next_batch;
  const Tensor &x_val, &y_val;
  // Made at the first batch (a model may learn its input shape from it), kept for the whole fit.
  std::shared_ptr<distribute::ModelReplicas> replicas;
  std::optional<distribute::TrainStep> step;
  distribute::GlobalBatch batch;
  std::optional<train::ProgressBar> bar;
  Logs logs;
  History history;
};

History Sequential::train_loop(const FitOptions& options, int64_t steps, const BatchSource& next_batch,
                               const Tensor& x_val, const Tensor& y_val) {
  distribute::set_job_phase(strategy_, "agreement checks");
  if (strategy_ != nullptr && strategy_->worker_communicator() != nullptr) {
    // Workers that differ would deadlock or silently train different things: compare first.
    std::string run_text = fmt::format("steps per epoch {}, epochs {}, validation rows {}", steps, options.epochs,
                                       x_val.defined() ? x_val.dim(0) : 0);
    for (const auto& [key, value] : options.run_config) run_text += fmt::format(", {} {}", key, value);
    distribute::check_workers_agree(*strategy_, "the data and settings", run_text);
  }
  TrainingPosition start = begin_training(options);
  if (strategy_ != nullptr && strategy_->worker_communicator() != nullptr) {
    std::string model_text;
    for (const auto& [key, value] : run_signature_) model_text += fmt::format("{}: {}; ", key, value);
    distribute::check_workers_agree(*strategy_, "the model, optimizer and batch size", model_text);
  }
  distribute::set_job_phase(strategy_, "training");
  // Only the chief prints progress (the others train the same steps).
  int verbose = strategy_ == nullptr || strategy_->is_chief() ? options.verbose : 0;
  TrainingRun run{options, steps, next_batch, x_val, y_val, {}, {}, {}, {}, {}, {}};
  for (int epoch = start.epoch; epoch < options.epochs && !stop_training; ++epoch) {
    if (verbose > 0) std::printf("Epoch %d/%d\n", epoch + 1, options.epochs);
    for (auto& cb : options.callbacks) cb->on_epoch_begin(epoch, {});
    run.bar.emplace(steps, verbose, stdout);
    for (Metric& m : running_metrics_) m.reset();
    int64_t first_step = 0;
    if (epoch == start.epoch && start.step > 0) {
      // Resuming mid-epoch: the same permutation (keyed by seed and epoch), the batches already
      // trained skipped, the epoch's running metrics as they were saved.
      first_step = start.step;
      for (size_t i = 0; i < running_metrics_.size() && i < restored_metrics_.size(); ++i)
        running_metrics_[i].restore(restored_metrics_[i]);
    }
    end_epoch(run, epoch, train_epoch(run, epoch, first_step));
  }
  for (auto& cb : options.callbacks) cb->on_train_end(run.logs);
  for (auto& cb : options.callbacks) cb->model = nullptr;
  running_metrics_.clear();
  return std::move(run.history);
}

TrainingPosition Sequential::begin_training(const FitOptions& options) {
  run_signature_ = options.run_config;
  std::string architecture;
  for (const auto& layer : layers_) {
    if (!architecture.empty()) architecture += ' ';
    architecture += layer->type();
  }
  for (Variable* v : variables()) architecture += " " + v->name + v->value.shape().str();
  run_signature_["architecture"] = architecture;
  run_signature_["optimizer"] =
      fmt::format("{} (learning rate {})", optimizer_->name(), optimizer_->current_learning_rate());
  run_signature_["batch_size"] = std::to_string(options.batch_size);
  run_signature_["seed"] = std::to_string(seed_);
  running_metrics_.clear();
  running_metrics_.emplace_back(Metric::Kind::Mean, "loss");
  for (const std::string& m : metric_names_) running_metrics_.push_back(Metric::parse(m, *loss_));
  for (auto& cb : options.callbacks) cb->model = this;
  stop_training = false;
  resume_from.reset();
  for (auto& cb : options.callbacks) cb->on_train_begin({});
  TrainingPosition start{options.initial_epoch, 0};
  if (resume_from) start = *resume_from;  // a callback restored a backup
  resume_from.reset();
  return start;
}

const Logs& Sequential::current_logs(Logs& logs) const {
  logs.clear();
  for (const Metric& m : running_metrics_) logs.emplace_back(m.name(), m.result());
  return logs;
}

// The metrics from the parts this process computed. With several processes, what each added
// (counts and sums, exact) is summed over them in the step's exchange (TrainStep::add_local_sums),
// so that every worker holds the global batch's metrics.
void Sequential::add_metrics(const distribute::StepResult& result) {
  for (size_t p = 0; p < result.predictions.size(); ++p)
    if (result.labels[p].defined())
      for (size_t i = 1; i < running_metrics_.size(); ++i)
        running_metrics_[i].update(result.labels[p], result.predictions[p]);
}

void Sequential::add_metrics_across_workers(const distribute::StepResult& result, std::vector<double>& values) {
  size_t n = running_metrics_.size();
  metric_sums_.resize(2 * n);
  for (size_t i = 1; i < n; ++i) {
    auto [total, count] = running_metrics_[i].accumulators();
    metric_sums_[2 * i] = total;
    metric_sums_[2 * i + 1] = static_cast<double>(count);
  }
  add_metrics(result);
  for (size_t i = 1; i < n; ++i) {
    auto [total, count] = running_metrics_[i].accumulators();
    values.push_back(total - metric_sums_[2 * i]);
    values.push_back(static_cast<double>(count) - metric_sums_[2 * i + 1]);
  }
}

void Sequential::take_summed_metrics(const distribute::StepResult& result) {
  for (size_t i = 1; i < running_metrics_.size(); ++i)
    running_metrics_[i].restore({metric_sums_[2 * i] + result.summed[2 * i - 2],
                                 static_cast<int64_t>(metric_sums_[2 * i + 1] + result.summed[2 * i - 1])});
}

// Every worker takes its rows of the same global batches: a worker whose data ran out, or whose
// batch has another size, would leave the others waiting or train on something else. Named.
void Sequential::check_same_batch(distribute::Communicator& workers, bool have, int64_t rows, int epoch, int64_t step) {
  int64_t mine[2] = {have ? 1 : 0, have ? rows : 0};
  std::vector<int64_t>& all = batch_sizes_;  // kept: this runs every step
  all.resize(2 * static_cast<size_t>(workers.size()));
  workers.all_gather(mine, 2, all.data(), distribute::DataType::Int64);
  auto describe = [&](size_t w) {
    return all[2 * w] == 0 ? std::string("has no batch left") : fmt::format("has one of {} rows", all[2 * w + 1]);
  };
  for (size_t w = 1; w < all.size() / 2; ++w)
    if (all[2 * w] != all[0] || all[2 * w + 1] != all[1])
      fail(
          "{}: at batch {} of epoch {} worker 0 {} and worker {} {}: every worker must read the same data (each takes "
          "its rows of every global batch)",
          strategy_->name(), step + 1, epoch + 1, describe(0), w, describe(w));
}

int64_t Sequential::train_epoch(TrainingRun& run, int epoch, int64_t first_step) {
  const auto& callbacks = run.options.callbacks;
  int64_t step = 0;
  distribute::Communicator* workers = strategy_ != nullptr ? strategy_->worker_communicator() : nullptr;
  for (; run.steps < 0 || step < run.steps; ++step) {
    bool have = run.next_batch(epoch, step, distribute::TrainStep::splits(strategy_), run.batch);
    if (workers != nullptr && workers->size() > 1) check_same_batch(*workers, have, run.batch.rows, epoch, step);
    if (!have) break;
    if (step < first_step) continue;
    if (!run.step) {
      make_replicas();  // from the current weights and optimizer state
      run.replicas = replicas_;
      run.step.emplace(strategy_, *run.replicas, *loss_, *optimizer_, seed_);
      if (workers != nullptr && workers->size() > 1)
        run.step->add_local_sums = [this](const distribute::StepResult& r, std::vector<double>& values) {
          add_metrics_across_workers(r, values);
        };
    }
    for (auto& cb : callbacks) cb->on_batch_begin(step, {});
    const distribute::StepResult& result = run.step->run(run.batch, static_cast<uint64_t>(optimizer_->iterations()));
    running_metrics_[0].update_mean(result.loss, run.batch.rows);  // the global batch's loss
    if (run.step->add_local_sums) take_summed_metrics(result);
    else add_metrics(result);
    position_ = TrainingPosition{epoch, step + 1};
    if (run.bar->due(step + 1)) run.bar->update(step + 1, current_logs(run.logs));
    if (!callbacks.empty()) {
      current_logs(run.logs);
      for (auto& cb : callbacks) cb->on_batch_end(step, run.logs);
    }
    if (stop_training) return step + 1;  // as Keras: a callback's stop takes effect after the batch
  }
  return step;
}

void Sequential::end_epoch(TrainingRun& run, int epoch, int64_t steps_done) {
  position_ = TrainingPosition{epoch + 1, 0};
  Logs& logs = run.logs;
  current_logs(logs);
  if (run.x_val.defined()) {
    distribute::JobPhase phase(strategy_, "validation");
    Logs val = run_evaluation(run.x_val, run.y_val, run.options.batch_size);
    for (const auto& [name, value] : val) logs.emplace_back("val_" + name, value);
  }
  for (auto& cb : run.options.callbacks) cb->on_epoch_logs(epoch, logs);
  run.bar->finish(steps_done, logs);
  logs.emplace_back("lr", optimizer_->current_learning_rate());
  for (const auto& [name, value] : logs) run.history.history[name].push_back(value);
  run.history.epochs.push_back(epoch);
  for (auto& cb : run.options.callbacks) cb->on_epoch_end(epoch, logs);
}

History Sequential::fit(const data::Dataset& dataset, const FitOptions& options) {
  check_compiled("fit");
  if (options.epochs < 0) fail("fit: epochs must be non-negative, got {}", options.epochs);
  if (options.validation_split != 0.0)
    fail("fit: validation_split does not apply to a Dataset; pass validation_data or take()/skip() a split");
  int64_t steps = dataset.cardinality();
  if (steps == data::Dataset::kInfinite) fail("fit: the dataset is infinite (repeat() without a count)");
  if (steps == data::Dataset::kUnknown) steps = -1;
  bool sparse = loss_->kind() == Loss::Kind::SparseCategoricalCrossentropy;
  Tensor x_val, y_val;
  if (options.validation_data) {
    x_val = options.validation_data->first;
    y_val = options.validation_data->second;
  }
  std::unique_ptr<data::Iterator> it;
  int it_epoch = -1;
  auto batches = [&](int epoch, int64_t step, bool, distribute::GlobalBatch& out) {
    Tensor& xb = out.x;
    Tensor& yb = out.y;
    if (it_epoch != epoch || step == 0) {
      it = dataset.iterate(epoch);
      it_epoch = epoch;
    }
    auto e = it->next();
    if (!e) return false;
    if (e->size() != 2) fail("fit: dataset elements must be (x, y) batches, got {} components", e->size());
    xb = (*e)[0];
    yb = (*e)[1];
    if (step == 0 && epoch == 0) check_data(xb, yb, "fit (dataset)");
    if (xb.dtype() != DType::Float32) fail("fit: dataset x batches must be float32, got {}", dtype_name(xb.dtype()));
    if (sparse && yb.dtype() != DType::Int32) yb = yb.astype(DType::Int32);
    if (sparse && yb.rank() != 1) yb = yb.reshape({yb.dim(0)});
    out.rows = xb.dim(0);
    return true;
  };
  return train_loop(options, steps, batches, x_val, y_val);
}

Logs Sequential::run_evaluation(const Tensor& x_in, const Tensor& y_in, int64_t batch) {
  StopRecording no_tape;
  bool sparse = loss_->kind() == Loss::Kind::SparseCategoricalCrossentropy;
  Tensor y = sparse && y_in.dtype() != DType::Int32 ? y_in.astype(DType::Int32) : y_in.contiguous();
  if (!sparse && y.dtype() != DType::Float32) y = y.astype(DType::Float32);
  if (sparse) y = y.reshape({y.dim(0)});
  Tensor x = x_in.contiguous();
  Metric loss_metric(Metric::Kind::Mean, "loss");
  std::vector<Metric> metrics;
  for (const std::string& m : metric_names_) metrics.push_back(Metric::parse(m, *loss_));
  for (int64_t begin = 0, n = x.dim(0); begin < n; begin += batch) {
    int64_t end = std::min(n, begin + batch);
    Tensor xb = x.slice(begin, end), yb = y.slice(begin, end);
    Tensor y_pred = call(xb, CallContext{false, {}});
    loss_metric.update_mean(ops::mean(loss_->per_sample(yb, y_pred)).item(), end - begin);
    for (Metric& m : metrics) m.update(yb, y_pred);
  }
  Logs logs{{"loss", loss_metric.result()}};
  for (const Metric& m : metrics) logs.emplace_back(m.name(), m.result());
  return logs;
}

Logs Sequential::evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& options) {
  check_compiled("evaluate");
  if (options.batch_size <= 0) fail("evaluate: batch_size must be positive, got {}", options.batch_size);
  if (!y.defined()) fail("evaluate: y is undefined");
  check_data(x, y, "evaluate");
  distribute::JobPhase phase(strategy_, "evaluation");
  Logs logs = run_evaluation(x, y, options.batch_size);
  if (options.verbose > 0) {
    std::string line = fmt::format("{}/{}", (x.dim(0) + options.batch_size - 1) / options.batch_size,
                                   (x.dim(0) + options.batch_size - 1) / options.batch_size);
    for (const auto& [name, value] : logs) line += fmt::format(" - {}: {:.4f}", name, value);
    std::printf("%s\n", line.c_str());
  }
  return logs;
}

Tensor Sequential::predict(const Tensor& x_in, int64_t batch_size) {
  if (batch_size <= 0) fail("predict: batch_size must be positive, got {}", batch_size);
  check_data(x_in, Tensor(), "predict");
  StopRecording no_tape;
  Tensor x = x_in.contiguous();
  Shape out_shape = layers_.back()->output_shape();
  Shape full{x.dim(0)};
  for (int64_t d : out_shape) full.push_back(d);
  Tensor out = Tensor::empty(full);
  for (int64_t begin = 0, n = x.dim(0); begin < n; begin += batch_size) {
    int64_t end = std::min(n, begin + batch_size);
    out.slice(begin, end).copy_from(call(x.slice(begin, end), CallContext{false, {}}));
  }
  return out;
}

}  // namespace tandem
