#pragma once
// Shared pieces of the `tandem` subcommands: model presets and model files, datasets shaped for
// a model (models.cpp), the flags several subcommands take (flags.cpp), and the processes they
// start (process.cpp).
#include <CLI/CLI.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/data/loaders.h"
#include "tandem/devices.h"
#include "tandem/distribute/cluster.h"
#include "tandem/distribute/strategy_registry.h"
#include "tandem/tandem.h"

namespace tandem::cli {

// A preset name ("mlp", "mlp5", "cnn", "cifar-mlp") or a path to a JSON model file.
struct ModelSpec {
  std::string name;
  std::unique_ptr<Model> model;
  std::string default_optimizer = "adam";
  float default_learning_rate = 0.001f;
  float default_momentum = 0.0f;
  Loss loss = Loss::sparse_categorical_crossentropy(false);
  std::vector<IgnoredInputShape> ignored_input_shapes;  // of a model file's later layers
};
// At --verbose 2: the later layers' input shapes a model file declared and Keras ignores, where
// they disagree with the model's (built) input.
void note_ignored_input_shapes(const ModelSpec& spec);
// Made inside `strategy`'s scope when one is given, so that it trains under it.
ModelSpec make_model(const std::string& model, uint64_t seed, distribute::Strategy* strategy = nullptr);
bool is_preset(const std::string& name);
std::string preset_names();

// The dataset's train and test splits, shaped for the model's input (flat or with channels).
data::ImageDataset load_for_model(const std::string& dataset, const std::string& data_dir, Model& model);

// Refuses "nan", "inf" and the like, which CLI11's Range lets through (every comparison with NaN
// is false).
extern const CLI::Validator finite_number;

struct CommonFlags {
  std::string model = "mlp";
  std::string dataset = "mnist";
  std::string data_dir;
  int64_t batch_size = 32;
  int threads = 0;
  uint64_t seed = 0;
  std::string precision = "float32";  // float32, or mixed_bf16 (Keras' mixed_bfloat16 policy)
  std::string device = "cpu";         // cpu, cuda or cuda:N (gpu, gpu:N)
  bool tf32 = false;                  // float32 products on a GPU's TF32 tensor cores
  void add_to(CLI::App& app, bool with_dataset = true);
  // The threads, the precision and --tf32 (refused with --device cpu), before the model is made.
  void apply() const;
  // The GPUs --device names (cuda: every one; cuda:N: that one; cpu: none); fails naming a GPU that
  // this build or machine does not have.
  std::vector<Device> gpus() const;
  // While alive, the layers made are placed on --device (nothing for the CPU, nor for a strategy
  // that places its replicas on the GPUs itself: mirrored); fails for another strategy of several
  // replicas with a GPU (docs/gpu.md: not built yet).
  std::optional<DeviceScope> place(const distribute::Strategy& strategy) const;
};

// The optimizer the flags ask for, with the values in force: "" (name), 0 (learning rate) and a
// negative momentum take the model's defaults, then the optimizer's.
struct OptimizerChoice {
  std::string name;
  float learning_rate = 0;
  float momentum = 0;
  bool has_momentum = false;     // sgd and rmsprop
  std::string describe() const;  // as flags: "--optimizer sgd --learning-rate 0.01 --momentum 0.95"
};
OptimizerChoice choose_optimizer(const std::string& name, float learning_rate, float momentum, const ModelSpec& spec);
std::unique_ptr<Optimizer> make_optimizer(const OptimizerChoice& choice);

double peak_rss_mb();

// Runs `args` (args[0] looked up on PATH) and waits: its exit status (128 + the signal that ended
// it). With `output`, its stdout and stderr are captured there (the first 4 KB), else they are
// this process's. Past `timeout_s` (when positive) it is killed and nullopt returned.
std::optional<int> run_command(std::vector<std::string> args, std::string* output = nullptr, double timeout_s = 0);
// A number and the unit written after it: "1.5GB" gives 1.5 and "GB"; nullopt where the text
// does not start with a number.
std::optional<std::pair<double, std::string>> number_and_unit(const std::string& text);
// In a forked child: becomes `args` (found on PATH), or says why not ("WHOcannot run …") and exits 127.
[[noreturn]] void exec_command(std::vector<std::string> args, const std::string& who);

// "a,b,,c" split at `separator`: {"a", "b", "", "c"}.
std::vector<std::string> split(const std::string& text, char separator);

// The thread choice and why (tandem fit --verbose 2), and the notes printed when a request
// exceeds the usable cores.
std::string describe_parallelism(const distribute::Strategy* strategy, int threads_flag);
void warn_about_parallelism(const distribute::Strategy& strategy, int threads_flag);
// A data-parallel strategy with more replicas than the global batch has rows is refused (the
// replicas past the rows would compute nothing at every step), naming both counts.
void refuse_idle_replicas(const distribute::Strategy& strategy, const std::string& name, int64_t batch_size);

// From the strategies' registry (strategy_flags.cpp): --strategy's help, and the refusal of a
// strategy's own flag (given: flag name, whether it was set) with a strategy that does not read it.
std::string strategy_help();
// A strategy's own flag's help: the strategies that read `flag` (the registry's), then `text`.
std::string for_strategies(const char* flag, const std::string& text);
void check_strategy_flags(const std::string& spec, const std::vector<std::pair<const char*, bool>>& given);

// The test accuracy after every epoch, and the training time until it first reached `target`.
class TargetAccuracy : public Callback {
 public:
  TargetAccuracy(Tensor x, Tensor y, double target, int64_t batch_size);
  void on_train_begin(const Logs&) override;
  void on_epoch_logs(int epoch, Logs& logs) override;
  bool reached() const { return reached_; }
  double seconds_to_target() const { return seconds_; }  // training seconds, evaluations left out
  int epoch_of_target() const { return epoch_; }
  double best() const { return best_; }

 private:
  using Clock = std::chrono::steady_clock;
  Tensor x_, y_;
  double target_;
  int64_t batch_size_;
  Clock::time_point start_;
  Clock::duration evaluating_{};
  bool reached_ = false;
  double seconds_ = 0, best_ = 0;
  int epoch_ = 0;
};

void add_fit(CLI::App& app);
// `tandem launch ARGS`: mpirun with the settings a user would otherwise look up.
int run_launch(const std::vector<std::string>& args);
// A parameter-server cluster's tasks, each on its host (here, or through the agent: ssh, or
// `rsh_agent`), supervised until the chief ends (launch_cluster.cpp); a worker or server that dies
// is started again, at most `restarts` times each. `slurm`: every task a step of this Slurm
// allocation on its node (srun), none a child here.
int run_cluster_launch(const distribute::ClusterSpec& cluster, const std::vector<std::string>& command,
                       const std::string& rsh_agent, double timeout, int restarts, bool dry_run, bool slurm = false);
// How a task starts on a node of this Slurm allocation: srun's words, the node's name to follow.
std::vector<std::string> slurm_step_agent();
// A chief, `workers` workers and `servers` servers on free loopback ports.
distribute::ClusterSpec loopback_cluster(int servers, int workers);
// Whether `host` names this machine.
bool is_this_machine(const std::string& host);
// Every task on another host can start a process there through the agent (ssh, or `rsh_agent`)
// within `timeout`, else the first that cannot is named.
struct RemoteTask {
  std::string name, address, host;  // "worker:1", "10.0.0.2:2222", "10.0.0.2"
};
void check_tasks_start(const std::vector<RemoteTask>& tasks, const std::string& rsh_agent, double timeout,
                       bool slurm = false);
void add_evaluate(CLI::App& app);
void add_predict(CLI::App& app);
void add_summary(CLI::App& app);
void add_datasets(CLI::App& app);
void add_keys(CLI::App& app);
void add_compare(CLI::App& app);

}  // namespace tandem::cli
