#pragma once
// Model: layers with Keras' compile / fit / evaluate / predict, made as a Sequential (a stack of
// layers, a chain) or a Functional (a graph traced from keras.Input to outputs, tandem/graph.h).
// The model is layers, how they connect, call, variables, summary and its files; fit hands off
// to its loop (src/fit/fit_loop.h), which runs the step its strategy makes
// (StrategyExtended::make_step).
#include <concepts>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tandem/autograd.h"
#include "tandem/callbacks.h"
#include "tandem/data/dataset.h"
#include "tandem/distribute/strategy.h"
#include "tandem/distribute/train_step.h"
#include "tandem/graph.h"
#include "tandem/io.h"
#include "tandem/layers.h"
#include "tandem/losses.h"
#include "tandem/metrics.h"
#include "tandem/optimizers.h"

namespace tandem {

struct FitOptions {
  int epochs = 1;
  int64_t batch_size = 32;
  // Training on a Dataset: batches per epoch (0: one pass). The dataset's iterator then runs on
  // across epochs, as Keras 3's: where it runs out at an epoch's start a new pass begins; where it
  // runs out inside an epoch, that epoch ends short with a warning and the next starts a new pass.
  // Arrays always train on every row.
  int64_t steps_per_epoch = 0;
  // Training on a Dataset: the pass (of shuffles that reshuffle) its first epoch reads; each later
  // epoch or new pass the next. Python's tandem.data counts the passes made of a pipeline.
  int dataset_pass = 0;
  double validation_split = 0.0;  // last fraction of x, y held out (before shuffling), as Keras
  std::optional<std::pair<Tensor, Tensor>> validation_data;
  // Validation on a pipeline of (x, y) batches instead (one pass at each epoch's end).
  std::optional<data::Dataset> validation_dataset;
  bool shuffle = true;
  std::vector<std::shared_ptr<Callback>> callbacks;
  int verbose = 1;  // 0 silent, 1 progress bar (one line per epoch when not a terminal), 2 one line per epoch
  int initial_epoch = 0;
  // What else identifies this run (dataset, strategy kind, ...), beside what fit records itself
  // (architecture, optimizer and learning rate, global batch size, seed): checkpoints carry it,
  // and BackupAndRestore resumes only a backup of the same run.
  std::map<std::string, std::string> run_config;
  // Keras' sample weights: `sample_weight` float, one per row of x (validation_split holds out its
  // share with the rows); `class_weight` class → weight, times a row's weight by its class (the
  // label; a one-hot target's largest entry; a (n, 1) target rounded, as Keras 3; validation rows
  // are not class-weighted, as Keras'). A row's
  // loss is multiplied by its weight, and a batch's loss is Σ weight·loss ÷ its rows (Keras'
  // SUM_OVER_BATCH_SIZE). A Dataset's weights are its elements' third component.
  Tensor sample_weight;
  std::map<int64_t, float> class_weight;
  // validation_data's weights (Keras' (x_val, y_val, val_sample_weights)); undefined: none.
  Tensor validation_sample_weight;
};

struct EvaluateOptions {
  int64_t batch_size = 32;
  int verbose = 0;
  Tensor sample_weight;  // one per row of x, as fit's (the loss a weighted mean: Σ w·loss ÷ rows)
};

// Where training stands: the next batch to run is batch `step` of epoch `epoch`.
struct TrainingPosition {
  int epoch = 0;
  int64_t step = 0;
};

struct ModelOptions {
  std::string name;   // empty: "sequential" or "functional"
  uint64_t seed = 0;  // weights, dropout and shuffling all derive from it
};
using SequentialOptions = ModelOptions;

class Model {
 public:
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  virtual ~Model() = default;

  // A Sequential's: adds a layer (by value, Keras-style: model.add(Dense(128, "relu"))). Names it
  // if unnamed. A Functional refuses it (its layers are its graph's).
  template <std::derived_from<layers::Layer> L>
  L& add(L layer) {
    auto p = std::make_shared<L>(std::move(layer));
    add(std::shared_ptr<layers::Layer>(p));
    return *p;
  }
  void add(std::shared_ptr<layers::Layer> layer);
  // Builds every layer for per-sample inputs of `input_shape` (done by the first call otherwise).
  void build(const Shape& input_shape);
  bool built() const;

  // Forward pass on a batch; records on the active GradientTape. Each training call draws fresh
  // dropout masks (keyed by a count of training calls), as in a custom training loop. Inside
  // Strategy::run it computes with the running replica's variables.
  Tensor operator()(const Tensor& x, bool training = false);
  Tensor call(const Tensor& x, const CallContext& ctx);

  std::string summary() const;  // Keras' table
  // The model as Keras' model.to_json() writes it (Keras 2's layout, which Keras 3 also reads);
  // model_from_json (tandem/model_json.h) reads it back.
  std::string to_json() const;
  void print_summary(std::FILE* out = stdout) const { std::fputs(summary().c_str(), out); }

  const std::vector<std::shared_ptr<layers::Layer>>& layers() const { return layers_; }
  // A Functional's graph (null: a Sequential, its layers a chain), and the layers with it.
  const layers::Graph* graph() const { return graph_.get(); }
  layers::Network network() const { return {layers_, graph_.get()}; }
  const char* kind() const { return graph_ ? "Functional" : "Sequential"; }
  // The per-sample input shape the model declares: a Functional's input's (several inputs: their
  // packed width, layers::pack_inputs), a Sequential's first layer's input_shape (none: not
  // declared).
  std::optional<Shape> declared_input_shape() const;
  // A built model's per-sample input (a model of several inputs: packed) and output shapes.
  Shape input_shape() const;
  Shape output_shape() const;
  // A Functional's inputs, as traced (a Sequential: none).
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  // A Functional's outputs (several: predictions and targets packed side by side, pack_inputs'
  // layout, a sparse target one column; compile takes one loss for all or Loss::outputs).
  const std::vector<Shape>& output_shapes() const { return output_shapes_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  // The model's variables; inside Strategy::run, the running replica's.
  std::vector<Variable*> variables();
  std::vector<Variable*> trainable_variables();
  // Keras' model.losses: each trainable (not frozen) variable's kernel_regularizer or
  // bias_regularizer penalty at its current value (as Keras 3: a frozen layer's are not), then the last call's activity penalties (each over the call's rows ÷ its rows),
  // recorded on the active tape (a custom loop adds them to its loss). Inside Strategy::run, the
  // running replica's.
  std::vector<Tensor> losses();
  // The weights' penalties summed, as evaluate adds them to the loss it reports (0: none).
  double weight_penalty();
  // Keras' model.trainable = False (or True): every layer frozen (or unfrozen), as
  // Layer::set_trainable; a layer may be set on its own after it (fine-tuning: freeze the base,
  // then train the head).
  void set_trainable(bool trainable);
  int64_t count_params() const;
  const std::string& name() const { return name_; }
  uint64_t seed() const { return seed_; }

  template <std::derived_from<Optimizer> O>
  void compile(O optimizer, Loss loss, std::vector<std::string> metrics = {}) {
    compile(std::unique_ptr<Optimizer>(std::make_unique<O>(std::move(optimizer))), std::move(loss), std::move(metrics));
  }
  void compile(const std::string& optimizer, Loss loss, std::vector<std::string> metrics = {});
  void compile(std::unique_ptr<Optimizer> optimizer, Loss loss, std::vector<std::string> metrics = {});
  bool compiled() const { return optimizer_ != nullptr; }
  Optimizer& optimizer();
  const Loss& loss() const;
  const std::vector<std::string>& metric_names() const { return metric_names_; }

  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  // Trains on a pipeline whose elements are (x, y) batches; epoch e is the dataset's pass e.
  // batch_size and validation_split do not apply (the dataset batches; use validation_data).
  History fit(const data::Dataset& dataset, const FitOptions& options = {});
  // {"loss": …, metric: …} on the given data, in inference mode.
  Logs evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& options = {});
  // The same on a pipeline of (x, y) batches: pass `pass` of it, or its first `steps` batches (0: all).
  Logs evaluate(const data::Dataset& dataset, int64_t steps = 0, int verbose = 0, int pass = 0);
  // The outputs for x (zero rows: an empty (0, outputs...) tensor, as Keras).
  Tensor predict(const Tensor& x, int64_t batch_size = 32);
  // The outputs for each batch of a pipeline (its elements' first component), concatenated.
  Tensor predict(const data::Dataset& dataset, int64_t steps = 0, int pass = 0);

  // Model state: every variable, then the optimizer's slots and step when compiled.
  std::vector<std::pair<std::string, Tensor>> state();
  // Weights (and optimizer state when compiled) as safetensors, written atomically, checksummed;
  // a path ending in ".weights.h5" gets Keras 3's HDF5 weights layout instead (Keras reads it).
  // load_weights reads either (an HDF5 file by its signature), or the weights of a .keras file.
  void save_weights(const std::string& path);
  void load_weights(const std::string& path);
  // The model as Keras 3's .keras file (a zip of config.json, metadata.json and
  // model.weights.h5), written atomically; load_model (tandem/model_json.h) reads it back.
  void save(const std::string& path);
  // Keras 3's config.json for this model (its Sequential config with build and compile configs).
  std::string keras_config() const;
  // A full checkpoint: state, seed, training position and the running metrics of the epoch in
  // progress, so that training resumed from it continues exactly.
  void save_checkpoint(const std::string& path);
  TrainingPosition load_checkpoint(const std::string& path);

  // The strategy of the scope the model was made in; outside any scope, a DefaultStrategy of its own.
  distribute::Strategy* strategy() const { return strategy_; }
  // Replica r's variables (0: this model's own), for checking that they stay mirrored.
  std::vector<Variable*> replica_variables(int replica);

  bool stop_training = false;  // a callback sets it to end fit after the current batch
  // Set by a callback in on_train_begin (BackupAndRestore) to continue an interrupted fit.
  std::optional<TrainingPosition> resume_from;
  const TrainingPosition& position() const { return position_; }
  // The run fit is training: options.run_config and what fit records itself (see FitOptions).
  const std::map<std::string, std::string>& run_signature() const { return run_signature_; }

  // What a training loop asks of the model (fit's, src/fit/fit_loop.h):
  // Starts a run: its signature (options.run_config, then the architecture with each mixed layer's
  // policy, the optimizer and learning rate, the batch size and the seed), the running metrics
  // made afresh (loss first), stop_training and resume_from cleared.
  void begin_run(const FitOptions& options);
  // The running metrics of the epoch in progress (loss first), which checkpoints save;
  // restore_running_metrics puts back those the last loaded checkpoint saved, for an epoch resumed
  // in its middle. end_run lets them go.
  std::span<Metric> running_metrics() { return running_metrics_; }
  void restore_running_metrics();
  void end_run() { running_metrics_.clear(); }
  // Where the loop's training stands, for the checkpoints written from now on.
  void set_position(TrainingPosition position) { position_ = position; }
  // The model's replicas under its strategy made anew from the current weights (replica 0: its
  // own layers); the optimizer's replica slots are copied again on the next step. The caller keeps
  // them alive for as long as it steps with them.
  std::shared_ptr<distribute::ModelReplicas> make_replicas();
  // The loss and metrics on held-out data in inference mode, without evaluate's checks (fit's
  // validation data was checked when fit began).
  Logs validation_logs(const Tensor& x, const Tensor& y, int64_t batch_size, const Tensor& sample_weight = {});
  // The same on pass `pass` of a pipeline of (x, y) batches (its first `steps`, 0: all); `batches`,
  // where given, gets how many it read; `what` names the caller in errors.
  Logs validation_logs(const data::Dataset& dataset, int64_t steps = 0, int pass = 0, int64_t* batches = nullptr,
                       const char* what = "evaluate (dataset)");

 protected:
  explicit Model(ModelOptions options);
  // A Functional: the graph from `inputs` to `outputs` (layers::trace), each layer built in the
  // graph's order with the model's seed.
  Model(std::span<const layers::SymbolicTensor> inputs, std::span<const layers::SymbolicTensor> outputs,
        ModelOptions options);

 private:
  void check_compiled(const char* what) const;
  io::NamedTensors checked_load(const std::string& path, std::map<std::string, std::string>* metadata);
  // Checks every variable's tensor in `tensors` (named as state() names them) and loads them, and
  // the optimizer's state when compiled and present; `source` names the file in errors.
  void restore_state(const io::NamedTensors& tensors, const std::string& source);
  // Keras 3's weights groups of this model (src/fit/keras_files.cpp), and their reading.
  std::string keras_weights();
  std::string functional_json() const;  // to_json's for a graph
  void load_keras_weights(std::string_view bytes, const std::string& source);
  void check_data(const Tensor& x, const Tensor& y, const char* what);
  // A pipeline's (x, y) or (x, y, sample weights) batch as fit and evaluate take it: x float32, y
  // as the loss reads it, the weights checked (times class_weight's; undefined: none).
  struct Batch {
    Tensor x, y, weights;
  };
  Batch dataset_batch(const data::Element& element, const char* what,
                      const std::map<int64_t, float>& class_weight = {});
  // The rows' weights: `given` (one per row of y, or undefined) times class_weight's by y's class,
  // checked and named in errors as `what`; undefined where neither is given.
  Tensor sample_weights(const Tensor& given, const std::map<int64_t, float>& class_weight, const Tensor& y,
                        const std::string& what) const;
  Shape output_rows(int64_t rows) const;  // the shape of `rows` outputs
  // The replica this thread runs as inside Strategy::run (made on first use), or null outside.
  distribute::ModelReplicas::Replica* running_replica(const Tensor* first_input);

  std::string name_;
  uint64_t seed_;
  std::unique_ptr<distribute::Strategy> own_strategy_;  // outside any scope: the default strategy
  distribute::Strategy* strategy_ = nullptr;
  std::shared_ptr<distribute::ModelReplicas> replicas_;
  std::mutex replicas_mutex_;
  std::vector<std::shared_ptr<layers::Layer>> layers_;
  std::shared_ptr<const layers::Graph> graph_;  // a Functional's; null: a chain
  std::vector<Shape> input_shapes_;
  std::vector<std::string> input_names_;
  std::vector<Shape> output_shapes_;
  std::vector<std::string> output_names_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<Loss> loss_;
  std::vector<std::string> metric_names_;
  uint64_t training_calls_ = 0;
  TrainingPosition position_;
  std::map<std::string, std::string> run_signature_;
  // The running metrics of the epoch in progress (loss first), saved in checkpoints.
  std::vector<Metric> running_metrics_;
  std::vector<Tensor> activity_losses_;  // the last call's activity penalties, per row
  std::vector<std::pair<double, int64_t>> restored_metrics_;
};

// Keras' Sequential: layers added one after another, each called on the last one's output.
class Sequential : public Model {
 public:
  explicit Sequential(ModelOptions options = {});
};

// Keras' functional Model(inputs, outputs): layers applied to keras.Input tensors (layers::Input,
// layers::apply), the model the graph between them.
class Functional : public Model {
 public:
  Functional(const layers::SymbolicTensor& input, const layers::SymbolicTensor& output, ModelOptions options = {});
  Functional(const std::vector<layers::SymbolicTensor>& inputs, const std::vector<layers::SymbolicTensor>& outputs,
             ModelOptions options = {});
};

}  // namespace tandem
