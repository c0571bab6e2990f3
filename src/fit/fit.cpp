// compile / fit / evaluate / predict: fit checks its arguments and makes the batch source that its
// loop (fit_loop.h) feeds to the strategy's step runner.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "fit/fit_loop.h"
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

// Batch `step` of epoch `epoch` of tensors in memory: the rows of the epoch's permutation (keyed
// by seed and epoch), gathered into new tensors.
class TensorBatches {
 public:
  TensorBatches(Tensor x, Tensor y, Tensor weights, int64_t batch, bool shuffled, uint64_t seed)
      : x_(std::move(x)),
        y_(std::move(y)),
        weights_(std::move(weights)),
        batch_(batch),
        shuffled_(shuffled),
        seed_(seed),
        index_(static_cast<size_t>(x_.dim(0))) {}

  // `lazy`: the rows are left to out.gather.
  bool fill(int epoch, int64_t step, bool lazy, distribute::GlobalBatch& out) {
    if (epoch != epoch_) {
      if (shuffled_) shuffle(index_, seed_, epoch);
      else std::iota(index_.begin(), index_.end(), 0);
      epoch_ = epoch;
    }
    int64_t rows = x_.dim(0);
    if (step < 0 || step * batch_ >= rows) return false;
    first_row_ = step * batch_;
    out.rows = std::min(rows, first_row_ + batch_) - first_row_;
    out.epoch = epoch;
    out.step = step;
    if (!out.gather)
      out.gather = [this](int64_t b, int64_t e, Tensor* xs, Tensor& ys) {
        if (xs != nullptr) *xs = gather_rows(x_, index_, first_row_ + b, first_row_ + e);
        ys = gather_rows(y_, index_, first_row_ + b, first_row_ + e);
      };
    out.x = out.y = Tensor();
    if (!lazy) out.gather(0, out.rows, &out.x, out.y);  // else each replica gathers its rows
    out.weights = weights_.defined() ? gather_rows(weights_, index_, first_row_, first_row_ + out.rows) : Tensor();
    return true;
  }

 private:
  Tensor x_, y_, weights_;
  int64_t batch_;
  bool shuffled_;
  uint64_t seed_;
  std::vector<int64_t> index_;
  int epoch_ = -1;
  int64_t first_row_ = 0;  // of the current batch, in index_
};

// fit's validation at each epoch's end: options' dataset, else x_val, y_val (undefined: none).
FitLoop::Validation validation_of(Model& model, const FitOptions& options, const Tensor& x_val, const Tensor& y_val,
                                  const Tensor& w_val = {}) {
  if (options.validation_dataset) {
    const data::Dataset& d = *options.validation_dataset;
    if (d.cardinality() == data::Dataset::kInfinite)
      fail("fit: validation_data is an infinite dataset (repeat() without a count): take(n) of it");
    return {[&model, d] { return model.validation_logs(d, 0, 0, nullptr, "fit (validation_data)"); },
            fmt::format("a dataset of {} batches", d.cardinality())};
  }
  if (!x_val.defined()) return {nullptr, "none"};
  return {[&model, x_val, y_val, w_val, batch = options.batch_size] {
            return model.validation_logs(x_val, y_val, batch, w_val);
          },
          fmt::format("{} rows{}", x_val.dim(0), w_val.defined() ? " (weighted)" : "")};
}

}  // namespace

void Model::compile(const std::string& optimizer, Loss loss, std::vector<std::string> metrics) {
  compile(optimizers::by_name(optimizer), std::move(loss), std::move(metrics));
}

void Model::compile(std::unique_ptr<Optimizer> optimizer, Loss loss, std::vector<std::string> metrics) {
  if (!optimizer) fail("compile: optimizer is null");
  if (output_names_.size() > 1) loss = loss.bound(output_shapes_, output_names_);  // one loss per output
  else if (loss.parts() != nullptr)
    fail("compile: a list of {} losses for {} \"{}\" of one output; give one loss", loss.parts()->size(), kind(),
         name_);
  Metric::reported(metrics, loss);  // rejects unknown names now, not mid-fit
  optimizer_ = std::move(optimizer);
  loss_ = std::move(loss);
  metric_names_ = std::move(metrics);
}

void Model::begin_run(const FitOptions& options) {
  check_compiled("fit");
  run_signature_ = options.run_config;
  std::string architecture;
  for (const auto& layer : layers_) {
    if (!architecture.empty()) architecture += ' ';
    architecture += layer->type();
    // Another precision gives other bits: a mixed layer's policy is part of the run.
    if (layer->dtype_policy() != "float32") architecture += "(" + layer->dtype_policy() + ")";
  }
  for (Variable* v : variables()) architecture += " " + v->name + v->value.shape().str();
  if (graph_)  // how a Functional's layers connect: each node's layer and what it reads
    for (const layers::Graph::Node& node : graph_->nodes)
      architecture += fmt::format(" {}<-({})", node.layer, fmt::join(node.inputs, ","));
  run_signature_["architecture"] = architecture;
  run_signature_["optimizer"] =
      fmt::format("{} (learning rate {})", optimizer_->name(), optimizer_->current_learning_rate());
  run_signature_["batch_size"] = std::to_string(options.batch_size);
  run_signature_["seed"] = std::to_string(seed_);
  running_metrics_ = Metric::reported(metric_names_, *loss_);
  stop_training = false;
  resume_from.reset();
}

Optimizer& Model::optimizer() {
  check_compiled("optimizer");
  return *optimizer_;
}

const Loss& Model::loss() const {
  check_compiled("loss");
  return *loss_;
}

void Model::check_compiled(const char* what) const {
  if (!optimizer_)
    fail("Sequential \"{}\": {} needs a compiled model; call compile(optimizer, loss, metrics) first", name_, what);
}

void Model::check_data(const Tensor& x, const Tensor& y, const char* what) {
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
  const Shape& expected = input_shape();
  if (!(per_sample == expected))
    fail("{}: x has samples of shape {}, the model expects {}", what, per_sample.str(), expected.str());
  if (y.defined() && loss_) loss_->check_targets(y, output_shape());
}

History Model::fit(const Tensor& x_all, const Tensor& y_all, const FitOptions& options) {
  check_compiled("fit");
  if (options.batch_size <= 0) fail("fit: batch_size must be positive, got {}", options.batch_size);
  if (options.epochs < 0) fail("fit: epochs must be non-negative, got {}", options.epochs);
  if (!(options.validation_split >= 0.0 && options.validation_split < 1.0))
    fail("fit: validation_split must be in [0, 1), got {}", options.validation_split);
  if (options.verbose < 0 || options.verbose > 2) fail("fit: verbose must be 0, 1 or 2, got {}", options.verbose);
  if (options.steps_per_epoch != 0)
    fail("fit: steps_per_epoch applies to a Dataset; with arrays every epoch covers x (got {})",
         options.steps_per_epoch);
  if (!y_all.defined()) fail("fit: y is undefined");
  check_data(x_all, y_all, "fit");

  bool sparse = loss_->kind() == Loss::Kind::SparseCategoricalCrossentropy;
  Tensor y_cast = sparse ? ops::class_labels(y_all, "fit: y") : y_all.contiguous();
  if (!sparse && y_cast.dtype() != DType::Float32) y_cast = y_cast.astype(DType::Float32);
  Tensor x_c = x_all.contiguous();
  if (sparse) y_cast = y_cast.reshape({y_cast.dim(0)});

  int64_t n = x_c.dim(0);
  // The given weights checked whole; class_weight weighs the training rows alone (not validation's, as Keras).
  Tensor given = sample_weights(options.sample_weight, {}, y_cast, "fit");
  Tensor x = x_c, y = y_cast, w = given, x_val, y_val, w_val;
  if (options.validation_data) {
    x_val = options.validation_data->first;
    y_val = options.validation_data->second;
    check_data(x_val, y_val, "fit (validation_data)");
    if (sparse) y_val = ops::class_labels(y_val, "validation_data: y");  // refused before any step
    w_val = sample_weights(options.validation_sample_weight, {}, y_val, "fit (validation_data)");
  } else if (options.validation_sample_weight.defined()) {
    fail("fit: validation_sample_weight is given without validation_data");
  } else if (options.validation_split > 0.0) {
    auto held = static_cast<int64_t>(std::floor(static_cast<double>(n) * options.validation_split));
    if (held == 0 || held == n)
      fail("fit: validation_split {} of {} samples leaves {} for validation and {} for training",
           options.validation_split, n, held, n - held);
    x = x_c.slice(0, n - held);
    y = y_cast.slice(0, n - held);
    x_val = x_c.slice(n - held, n);
    y_val = y_cast.slice(n - held, n);
    if (given.defined()) {  // Keras splits the weights with the rows
      w = given.slice(0, n - held);
      w_val = given.slice(n - held, n);
    }
  }
  if (!options.class_weight.empty()) w = sample_weights(w, options.class_weight, y, "fit");
  int64_t rows = x.dim(0), batch = options.batch_size;
  int64_t steps = (rows + batch - 1) / batch;

  // fit's loop reads the batches in order; a parameter-server worker reads those the chief names.
  auto in_order = std::make_shared<TensorBatches>(x, y, w, batch, options.shuffle, seed_);
  auto batches = [in_order](int epoch, int64_t step, bool lazy, distribute::GlobalBatch& out) {
    return in_order->fill(epoch, step, lazy, out);
  };
  auto at = [x, y, w, batch, shuffled = options.shuffle, seed = seed_, by_position = std::shared_ptr<TensorBatches>()](
                int epoch, int64_t step, distribute::GlobalBatch& out) mutable {
    if (!by_position) by_position = std::make_shared<TensorBatches>(x, y, w, batch, shuffled, seed);  // on first use
    return by_position->fill(epoch, step, false, out);
  };
  return FitLoop(*this, options, steps, batches, validation_of(*this, options, x_val, y_val, w_val), at).run();
}

History Model::fit(const data::Dataset& dataset, const FitOptions& options) {
  check_compiled("fit");
  if (options.epochs < 0) fail("fit: epochs must be non-negative, got {}", options.epochs);
  if (options.validation_split != 0.0)
    fail("fit: validation_split does not apply to a Dataset; pass validation_data or take()/skip() a split");
  if (options.steps_per_epoch < 0) fail("fit: steps_per_epoch must be positive, got {}", options.steps_per_epoch);
  if (options.sample_weight.defined())
    fail("fit: sample_weight does not apply to a Dataset; make its elements (x, y, sample_weight)");
  if (options.validation_sample_weight.defined())
    fail("fit: validation_sample_weight does not apply to a Dataset; make the validation elements (x, y, weights)");
  bool runs_on = options.steps_per_epoch > 0;  // one iterator across epochs, as Keras'
  int64_t steps = runs_on ? options.steps_per_epoch : dataset.cardinality();
  if (steps == data::Dataset::kInfinite)
    fail("fit: the dataset is infinite (repeat() without a count): pass steps_per_epoch");
  if (steps == data::Dataset::kUnknown) steps = -1;
  std::unique_ptr<data::Iterator> it;
  int pass = options.dataset_pass - 1, it_epoch = -1;
  auto batches = [&](int epoch, int64_t step, bool, distribute::GlobalBatch& out) {
    // A new pass: each epoch's without steps_per_epoch; with it, where the last pass ran out.
    if (!it || (!runs_on && (it_epoch != epoch || step == 0))) {
      pass = runs_on ? pass + 1 : options.dataset_pass + epoch;
      it = dataset.iterate(pass);
      it_epoch = epoch;
    }
    std::optional<data::Element> e = it->next();
    if (!e && runs_on && step == 0) {  // ran out at the epoch's start: the next pass
      it = dataset.iterate(++pass);
      e = it->next();
    }
    if (!e) {
      if (step == 0) fail("fit: the dataset gave no batches in epoch {}", epoch + 1);
      if (runs_on) {
        std::fprintf(stderr,
                     "fit: the dataset ran out after %lld of epoch %d's %lld steps (steps_per_epoch); the epoch ends "
                     "there and the next starts a new pass\n",
                     static_cast<long long>(step), epoch + 1, static_cast<long long>(steps));
        it.reset();
      }
      return false;
    }
    Batch b = dataset_batch(*e, "fit (dataset)", options.class_weight);
    out.x = b.x, out.y = b.y, out.weights = b.weights;
    out.rows = out.x.dim(0);
    return true;
  };
  return FitLoop(*this, options, steps, batches, validation_of(*this, options, Tensor(), Tensor())).run();
}

Model::Batch Model::dataset_batch(const data::Element& element, const char* what,
                                  const std::map<int64_t, float>& class_weight) {
  if (element.size() != 2 && element.size() != 3)
    fail("{}: dataset elements must be (x, y) or (x, y, sample_weight) batches, got {} component{}", what,
         element.size(), element.size() == 1 ? "" : "s");
  Tensor x = element[0], y = element[1];
  if (built() && (x.rank() < 2 || x.shape() == input_shape()))
    fail("{}: x has shape {}, one sample of the model's input {}: batch the dataset (.batch(n)) first", what,
         x.shape().str(), input_shape().str());
  if (x.defined() && x.dtype() != DType::Float32) x = x.astype(DType::Float32);  // as Keras casts its inputs
  check_data(x, y, what);
  bool sparse = loss_->kind() == Loss::Kind::SparseCategoricalCrossentropy;
  if (sparse) y = ops::class_labels(y, fmt::format("{}: y", what));
  if (sparse && y.rank() != 1) y = y.reshape({y.dim(0)});
  if (!sparse && y.dtype() != DType::Float32) y = y.astype(DType::Float32);
  return {x, y, sample_weights(element.size() == 3 ? element[2] : Tensor(), class_weight, y, what)};
}

namespace {

// The loss and metrics of inference batches, as evaluate and validation report them.
class Tally {
 public:
  // The loss reported adds the weights' penalties and each row's activity penalties, as fit's.
  Tally(Model& model, const Loss& loss, const std::vector<std::string>& metric_names)
      : model_(model), loss_(loss), weight_penalty_(model.weight_penalty()) {
    metrics_ = Metric::reported(metric_names, loss);
    metrics_.erase(metrics_.begin());  // the loss: loss_metric_'s
  }
  // `weights`: the rows' sample weights (undefined: 1 each), which weigh their losses.
  void add(const Tensor& x, const Tensor& y, const Tensor& weights) {
    std::vector<Tensor> penalties;
    CallContext context{false, {}};
    context.penalties = &penalties;
    Tensor y_pred = model_.call(x, context), per_sample = loss_.per_sample(y, y_pred);
    if (weights.defined()) per_sample = ops::mul(per_sample, ops::to_device(weights, per_sample.device()));
    for (const Tensor& p : penalties) per_sample = ops::add(per_sample, p);
    loss_metric_.update_mean(ops::mean(per_sample).item() + weight_penalty_, y_pred.dim(0));
    for (Metric& m : metrics_) m.update(y, y_pred);
    ++batches_;
  }
  int64_t batches() const { return batches_; }
  Logs logs() const {
    Logs logs{{"loss", loss_metric_.result()}};
    for (const Metric& m : metrics_) logs.emplace_back(m.name(), m.result());
    return logs;
  }

 private:
  Model& model_;
  const Loss& loss_;
  double weight_penalty_;
  Metric loss_metric_{Metric::Kind::Mean, "loss"};
  std::vector<Metric> metrics_;
  int64_t batches_ = 0;
};

void print_evaluation(int64_t batches, const Logs& logs) {
  std::string line = fmt::format("{}/{}", batches, batches);
  for (const auto& [name, value] : logs) line += fmt::format(" - {}: {:.4f}", name, value);
  std::printf("%s\n", line.c_str());
}

}  // namespace

Logs Model::validation_logs(const Tensor& x_in, const Tensor& y_in, int64_t batch, const Tensor& weights) {
  StopRecording no_tape;
  bool sparse = loss_->kind() == Loss::Kind::SparseCategoricalCrossentropy;
  Tensor y = sparse ? ops::class_labels(y_in, "validation_data: y") : y_in.contiguous();
  if (!sparse && y.dtype() != DType::Float32) y = y.astype(DType::Float32);
  if (sparse) y = y.reshape({y.dim(0)});
  Tensor x = x_in.contiguous();
  Tally tally(*this, *loss_, metric_names_);
  for (int64_t begin = 0, n = x.dim(0); begin < n; begin += batch) {
    int64_t end = std::min(n, begin + batch);
    tally.add(x.slice(begin, end), y.slice(begin, end), weights.defined() ? weights.slice(begin, end) : Tensor());
  }
  return tally.logs();
}

Logs Model::validation_logs(const data::Dataset& dataset, int64_t steps, int pass, int64_t* batches, const char* what) {
  StopRecording no_tape;
  Tally tally(*this, *loss_, metric_names_);
  std::unique_ptr<data::Iterator> it = dataset.iterate(pass);
  while (steps == 0 || tally.batches() < steps) {
    std::optional<data::Element> e = it->next();
    if (!e) break;
    Batch b = dataset_batch(*e, what);
    tally.add(b.x, b.y, b.weights);
  }
  if (tally.batches() == 0) fail("{}: the dataset gave no batches", what);
  if (batches != nullptr) *batches = tally.batches();
  return tally.logs();
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& options) {
  check_compiled("evaluate");
  if (options.batch_size <= 0) fail("evaluate: batch_size must be positive, got {}", options.batch_size);
  if (!y.defined()) fail("evaluate: y is undefined");
  check_data(x, y, "evaluate");
  distribute::JobPhase phase(*strategy_, "evaluation");
  Tensor weights = sample_weights(options.sample_weight, {}, y, "evaluate");
  Logs logs = validation_logs(x, y, options.batch_size, weights);
  if (options.verbose > 0) print_evaluation((x.dim(0) + options.batch_size - 1) / options.batch_size, logs);
  return logs;
}

Logs Model::evaluate(const data::Dataset& dataset, int64_t steps, int verbose, int pass) {
  check_compiled("evaluate");
  if (steps < 0) fail("evaluate: steps must be positive, got {}", steps);
  if (steps == 0 && dataset.cardinality() == data::Dataset::kInfinite)
    fail("evaluate: the dataset is infinite (repeat() without a count): pass steps");
  distribute::JobPhase phase(*strategy_, "evaluation");
  int64_t batches = 0;
  Logs logs = validation_logs(dataset, steps, pass, &batches);
  if (verbose > 0) print_evaluation(batches, logs);
  return logs;
}

Tensor Model::predict(const Tensor& x_in, int64_t batch_size) {
  if (batch_size <= 0) fail("predict: batch_size must be positive, got {}", batch_size);
  if (x_in.defined() && x_in.rank() >= 2 && x_in.dim(0) == 0) {  // no rows: Keras' empty result
    if (!built()) fail("predict: x has no rows and the model is not built, so its output shape is unknown");
    Shape per_sample(std::span<const int64_t>(x_in.shape().begin() + 1, x_in.shape().end()));
    if (!(per_sample == input_shape()))
      fail("predict: x has samples of shape {}, the model expects {}", per_sample.str(), input_shape().str());
    return Tensor::empty(output_rows(0));
  }
  check_data(x_in, Tensor(), "predict");
  StopRecording no_tape;
  Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(output_rows(x.dim(0)));
  for (int64_t begin = 0, n = x.dim(0); begin < n; begin += batch_size) {
    int64_t end = std::min(n, begin + batch_size);
    out.slice(begin, end).copy_from(call(x.slice(begin, end), CallContext{false, {}}));
  }
  return out;
}

Tensor Model::predict(const data::Dataset& dataset, int64_t steps, int pass) {
  if (steps < 0) fail("predict: steps must be positive, got {}", steps);
  if (steps == 0 && dataset.cardinality() == data::Dataset::kInfinite)
    fail("predict: the dataset is infinite (repeat() without a count): pass steps");
  StopRecording no_tape;
  std::vector<Tensor> outputs;
  int64_t rows = 0;
  std::unique_ptr<data::Iterator> it = dataset.iterate(pass);
  while (steps == 0 || static_cast<int64_t>(outputs.size()) < steps) {
    std::optional<data::Element> e = it->next();
    if (!e) break;
    if (e->empty()) fail("predict: a dataset element has no components");
    Tensor x = (*e)[0];
    if (x.defined() && x.dtype() != DType::Float32) x = x.astype(DType::Float32);
    check_data(x, Tensor(), "predict (dataset)");
    outputs.push_back(call(x.contiguous(), CallContext{false, {}}));
    rows += x.dim(0);
  }
  if (outputs.empty()) {
    if (!built()) fail("predict: the dataset gave no batches and the model is not built");
    return Tensor::empty(output_rows(0));
  }
  Tensor out = Tensor::empty(output_rows(rows));
  int64_t at = 0;
  for (const Tensor& o : outputs) {
    out.slice(at, at + o.dim(0)).copy_from(o);
    at += o.dim(0);
  }
  return out;
}

Shape Model::output_rows(int64_t rows) const {
  Shape full{rows};
  for (int64_t d : output_shape()) full.push_back(d);
  return full;
}

}  // namespace tandem
