// tandem fit: trains a preset or JSON model on a dataset, with checkpoints, a resumable backup,
// TensorBoard logs and an optional JSON report; then evaluates on the test split.
#include <fmt/ranges.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/fit_timeline.h"
#include "tandem/collectives/mpi.h"
#include "tandem/distribute/model_parallel.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/slurm.h"

namespace tandem::cli {
namespace {

// "64MB", "1.5GB", "500KB", "64MiB" or a count of bytes.
int64_t parse_bytes(const std::string& text, const char* flag) {
  auto [value, unit] = number_and_unit(text).value_or(std::make_pair(0.0, std::string()));
  double scale = unit.empty() || unit == "B"   ? 1
                 : unit == "KB" || unit == "K" ? 1e3
                 : unit == "MB" || unit == "M" ? 1e6
                 : unit == "GB" || unit == "G" ? 1e9
                 : unit == "KiB"               ? 1024.0
                 : unit == "MiB"               ? 1048576.0
                 : unit == "GiB"               ? 1073741824.0
                                               : 0;
  if (scale == 0 || !(value > 0) || value * scale > 9e18)
    fail("fit: {} must be a size such as 64MB, 1.5GB or 500KB, not \"{}\"", flag, text);
  return static_cast<int64_t>(value * scale);
}

struct FitFlags {
  CommonFlags common;
  int epochs = 10;
  std::string optimizer;
  float learning_rate = 0.0f;
  float momentum = -1.0f;
  float lr_decay = 1.0f;
  double validation_split = 0.0;
  std::string run_dir;         // "": a new runs/<model>-N
  std::string checkpoint_dir;  // unless given: <run>/checkpoints
  bool checkpoint_dir_given = false;
  int64_t backup_every = 1000;
  std::string log_dir;  // unless given: <run>/logs
  bool log_dir_given = false;
  int64_t log_every = 0;
  std::string csv_log;
  int early_stopping = 0;
  std::string report;
  std::string strategy = "default";
  double timeout = 30.0;         // seconds a worker waits for the others
  double fusion_mb = 0.0;        // tensor fusion buckets (0: one all-reduce after backward)
  std::string cluster;           // parameter servers: the cluster spec's file (empty: TF_CONFIG)
  double shard_mb = 0.0;         // parameter servers: variables above this size are split over the servers
  double target_accuracy = 0.0;  // test accuracy after every epoch, and the time to reach this
  bool prefetch = false;         // ps-async: the next pull right after each push
  std::string auth;              // ps-*: CurveZMQ keys' directory
  bool insecure = false;         // ps-*: listening on a non-loopback address without keys
  std::string record, replay;    // ps-async: the order of the servers' updates, written or forced
  int min_workers = 1;           // synchronous rounds: the job ends when fewer workers are left
  std::string device_memory;     // model-parallel:N: each device's memory ("64MB")
  double cycle_time_ms = 0.0;
  std::string compression = "none";
  std::string timeline;  // Chrome trace file ("": none)
  bool overwrite = false;
  int verbose = 1;
};

// A checkpoint directory that holds a finished run's checkpoints (and no backup to resume) is
// not trained into silently: the runs' files would mix.
void check_checkpoint_dir(const std::string& dir, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty()) return;
  // Writable now, not after the first epoch's work.
  fs::create_directories(dir, ec);
  io::write_file_atomically(dir + "/.tandem-write-test", "");
  fs::remove(dir + "/.tandem-write-test", ec);
  if (fs::exists(dir + "/backup/backup.safetensors", ec)) return;
  std::vector<std::string> earlier;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) &&
        (entry.path().extension() == ".safetensors" || entry.path().filename() == "checkpoint"))
      earlier.push_back(entry.path().filename().string());
  if (earlier.empty()) return;
  std::sort(earlier.begin(), earlier.end());
  if (!overwrite)
    fail(
        "--checkpoint-dir \"{}\" holds the checkpoints of an earlier, finished run ({}); train into another "
        "--checkpoint-dir, remove them, or pass --overwrite to replace them",
        dir, fmt::join(earlier, ", "));
  for (const std::string& name : earlier) fs::remove(dir + "/" + name, ec);
}

// Where a run's checkpoints and logs go when not given: the run directory named, or a new one,
// runs/<model>-1, -2, ... (the first that does not exist), as Ultralytics and Lightning do.
void choose_run_directory(FitFlags& f) {
  if (f.checkpoint_dir_given && f.log_dir_given) return;
  std::string run = f.run_dir;
  if (run.empty()) {
    std::string stem = std::filesystem::path(f.common.model).stem().string();
    for (int n = 1;; ++n) {
      run = fmt::format("runs/{}-{}", stem, n);
      if (!std::filesystem::exists(run)) break;
    }
  }
  if (!f.checkpoint_dir_given) f.checkpoint_dir = run + "/checkpoints";
  if (!f.log_dir_given) f.log_dir = run + "/logs";
  if (f.verbose > 0)
    std::printf(
        "Run directory: %s (checkpoints: %s, logs: %s). If this run is interrupted, the same command with "
        "--run-dir %s resumes it.\n",
        run.c_str(), f.checkpoint_dir.empty() ? "none" : f.checkpoint_dir.c_str(),
        f.log_dir.empty() ? "none" : f.log_dir.c_str(), run.c_str());
}

// A failure of another worker (or of this one's collectives): said once, then this process ends,
// whatever its threads are doing, so that no worker outlives the job waiting.
void end_on_worker_failure(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  distribute::linger_after_failure();  // the other workers print theirs before the launcher ends them
  _exit(1);
}

// The chief's choice of `text` on every worker (the run directory, chosen where it is created).
void from_chief(distribute::Strategy& strategy, std::string& text) {
  distribute::Communicator* workers = strategy.extended().worker_communicator();
  if (workers == nullptr || workers->size() == 1) return;
  std::vector<int64_t> buffer(1 + (text.size() + 7) / 8, 0);
  buffer[0] = static_cast<int64_t>(text.size());
  int64_t words = static_cast<int64_t>(buffer.size());
  workers->broadcast(&words, 1, distribute::DataType::Int64, 0);
  buffer.resize(static_cast<size_t>(words));
  std::memcpy(buffer.data() + 1, text.data(), std::min(text.size(), (buffer.size() - 1) * 8));
  workers->broadcast(buffer.data(), words, distribute::DataType::Int64, 0);
  text.assign(reinterpret_cast<const char*>(buffer.data() + 1), static_cast<size_t>(buffer[0]));
}

distribute::Compression compression_named(const std::string& name) {
  for (auto c : {distribute::Compression::None, distribute::Compression::Float16, distribute::Compression::BFloat16})
    if (name == distribute::compression_name(c)) return c;
  fail("--compression \"{}\": expected none, fp16 or bf16", name);
}

// Which of the strategies' own flags this fit was given (check_strategy_flags refuses the ones its
// strategy does not read).
std::vector<std::pair<const char*, bool>> strategy_flags_given(const FitFlags& f) {
  return {{"fusion-mb", f.fusion_mb > 0},
          {"cycle-time-ms", f.cycle_time_ms > 0},
          {"compression", f.compression != "none"},
          {"cluster", !f.cluster.empty()},
          {"shard-mb", f.shard_mb > 0},
          {"prefetch", f.prefetch},
          {"auth", !f.auth.empty()},
          {"insecure", f.insecure},
          {"record", !f.record.empty()},
          {"replay", !f.replay.empty()},
          {"min-workers", f.min_workers != 1},
          {"device-memory", !f.device_memory.empty()}};
}

void run_fit(FitFlags f) {
  auto start = std::chrono::steady_clock::now();
  f.common.apply();
  distribute::StrategySettings settings;
  settings.threads_per_replica = f.common.threads;
  settings.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout * 1000));
  settings.on_failure = end_on_worker_failure;
  settings.insecure = f.insecure;
  auto& fusion = settings.of<distribute::DataParallelSettings>();
  fusion.bucket_bytes = static_cast<int64_t>(f.fusion_mb * 1024 * 1024);
  fusion.cycle_time = std::chrono::microseconds(static_cast<int64_t>(f.cycle_time_ms * 1000));
  fusion.compression = compression_named(f.compression);
  auto& ps = settings.of<distribute::ParameterServerSettings>();
  if (f.cluster == "slurm" || f.cluster.starts_with("slurm:")) {  // the roles from the Slurm step this task is in
    distribute::SlurmOptions options = distribute::parse_slurm_options(f.cluster.substr(f.cluster.size() > 6 ? 6 : 5));
    distribute::SlurmCluster slurm = distribute::slurm_cluster(options);
    ps.cluster_json = slurm.spec.to_json(slurm.spec.task());
    if (options.auto_set_gpu && !slurm.gpus.empty()) setenv("CUDA_VISIBLE_DEVICES", slurm.gpus.c_str(), 1);
  } else {
    ps.cluster_file = f.cluster;
  }
  ps.shard_bytes = static_cast<int64_t>(f.shard_mb * 1024 * 1024);
  ps.ps.prefetch = f.prefetch;
  ps.ps.auth_dir = f.auth;
  ps.ps.insecure = f.insecure;
  ps.ps.record = f.record;
  ps.ps.replay = f.replay;
  ps.ps.min_workers = f.min_workers;
  check_strategy_flags(f.strategy, strategy_flags_given(f));
  if (!f.device_memory.empty())
    settings.of<distribute::ModelParallelSettings>().device_memory_bytes =
        parse_bytes(f.device_memory, "--device-memory");
  settings.of<distribute::DataParallelSettings>().devices = f.common.gpus();  // mirrored: a replica per GPU
  std::unique_ptr<distribute::Strategy> strategy = distribute::make_strategy(f.strategy, settings);
  refuse_idle_replicas(*strategy, f.strategy, f.common.batch_size);
  distribute::set_job_phase(*strategy, "start-up");  // the model, the data, the run directory
  std::unique_ptr<Timeline> timeline;
  if (!f.timeline.empty()) timeline = start_timeline(*strategy, f.timeline);
  bool chief = strategy->extended().is_chief();
  if (!chief) f.verbose = 0;                // the chief speaks for every worker
  auto placed = f.common.place(*strategy);  // the layers made from here on (the model's) on --device
  if (chief) choose_run_directory(f);
  from_chief(*strategy, f.checkpoint_dir);
  from_chief(*strategy, f.log_dir);
  if (f.verbose > 0) warn_about_parallelism(*strategy, f.common.threads);
  if (f.verbose > 1) std::printf("%s\n", describe_parallelism(strategy.get(), f.common.threads).c_str());
  ModelSpec spec = make_model(f.common.model, f.common.seed, strategy.get());
  Model& model = *spec.model;
  auto data = load_for_model(f.common.dataset, f.common.data_dir, model);
  if (f.verbose > 0)
    std::printf("Data: %s (searched %s)\n", data.directory.c_str(),
                f.common.data_dir.empty() ? "$TANDEM_DATA, then ./data" : "--data-dir, then $TANDEM_DATA, then ./data");
  OptimizerChoice optimizer_choice = choose_optimizer(f.optimizer, f.learning_rate, f.momentum, spec);
  auto optimizer = make_optimizer(optimizer_choice);
  int64_t train_rows = data.train.x.dim(0) - static_cast<int64_t>(std::floor(data.train.x.dim(0) * f.validation_split));
  int64_t steps_per_epoch = (train_rows + f.common.batch_size - 1) / f.common.batch_size;
  if (f.lr_decay < 1.0f)
    optimizer->set_learning_rate(
        std::make_shared<ExponentialDecay>(optimizer->current_learning_rate(), steps_per_epoch, f.lr_decay));
  std::string optimizer_name = optimizer->name();
  float initial_learning_rate = optimizer->current_learning_rate();
  model.compile(std::move(optimizer), spec.loss, {"accuracy"});
  if (f.verbose > 1) {
    model.build(*model.declared_input_shape());  // load_for_model checked it
    note_ignored_input_shapes(spec);
  }
  if (f.verbose > 0) model.print_summary();

  FitOptions options{.epochs = f.epochs,
                     .batch_size = f.common.batch_size,
                     .validation_split = f.validation_split,
                     .verbose = f.verbose};
  if (chief) check_checkpoint_dir(f.checkpoint_dir, f.overwrite);
  // The strategy's kind, not its counts nor where its tasks run: its name's words that are neither
  // numbers nor a parameter-server cluster's "PxW" and "threads" (a run resumes launched or in process).
  std::string strategy_kind;
  for (const std::string& part : split(strategy->name(), ':'))
    if (part.find_first_not_of("0123456789") != std::string::npos && part.find_first_not_of("0123456789x") != 0 &&
        part != "threads")
      strategy_kind += (strategy_kind.empty() ? "" : ":") + part;
  // The values in force, whether given or the model's defaults.
  std::string run_config_optimizer = fmt::format("{} --lr-decay {}", optimizer_choice.describe(), f.lr_decay);
  options.run_config = {
      {"dataset", f.common.dataset}, {"strategy", strategy_kind}, {"optimizer flags", run_config_optimizer}};
  if (!f.checkpoint_dir.empty()) {
    options.callbacks.push_back(std::make_shared<BackupAndRestore>(
        f.checkpoint_dir + "/backup", BackupAndRestoreOptions{.save_freq = f.backup_every}));
    options.callbacks.push_back(std::make_shared<ModelCheckpoint>(f.checkpoint_dir + "/ckpt-{epoch:02d}"));
  }
  if (!f.log_dir.empty())
    options.callbacks.push_back(std::make_shared<TensorBoard>(f.log_dir, TensorBoardOptions{f.log_every}));
  if (!f.csv_log.empty()) options.callbacks.push_back(std::make_shared<CSVLogger>(f.csv_log));
  if (f.early_stopping > 0)
    options.callbacks.push_back(std::make_shared<EarlyStopping>(
        EarlyStoppingOptions{.monitor = f.validation_split > 0 ? "val_loss" : "loss", .patience = f.early_stopping}));
  std::shared_ptr<TargetAccuracy> target;
  if (f.target_accuracy > 0) {
    target = std::make_shared<TargetAccuracy>(data.test.x, data.test.y, f.target_accuracy,
                                              std::max<int64_t>(f.common.batch_size, 256));
    options.callbacks.push_back(target);
  }
  auto nan_guard = std::make_shared<TerminateOnNaN>();
  options.callbacks.push_back(nan_guard);

  auto train_start = std::chrono::steady_clock::now();
  History history = model.fit(data.train.x, data.train.y, options);
  if (strategy->extended().serves()) return;  // a parameter server or worker: the chief ended the job
  double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
  if (nan_guard->terminated()) {
    std::string last = f.checkpoint_dir.empty() ? std::string() : latest_checkpoint(f.checkpoint_dir);
    fail(
        "training diverged: the loss is not finite at {}; no final checkpoint was written{}. Try a smaller "
        "--learning-rate (it was {})",
        nan_guard->where(), last.empty() ? "" : fmt::format(" (the last good one is {})", last),
        model.optimizer().current_learning_rate());
  }
  if (timeline) finish_timeline(*strategy, *timeline, f.timeline, f.verbose);
  int epochs_run = static_cast<int>(history.epochs.size());
  distribute::set_job_phase(*strategy, "evaluation");
  Logs test = model.evaluate(data.test.x, data.test.y, {.batch_size = std::max<int64_t>(f.common.batch_size, 256)});
  // Then the chief writes the final checkpoint and the report, and the others wait for it to end.
  distribute::set_job_phase(*strategy, "the final report");
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!chief) {
    if (!f.checkpoint_dir.empty() && strategy->extended().collects_state_together()) model.state();  // the final one's
    return;
  }
  std::printf("Test loss: %.4f - test accuracy: %.2f%% (%.1f s wall)\n", log_value(test, "loss"),
              100.0 * log_value(test, "accuracy"), wall);
  if (target && target->reached())
    std::printf("Reached %.2f%% test accuracy after %.1f s of training (epoch %d); best %.2f%%\n",
                100.0 * f.target_accuracy, target->seconds_to_target(), target->epoch_of_target(),
                100.0 * target->best());
  else if (target)
    std::printf("Did not reach %.2f%% test accuracy in %d epochs; best %.2f%%\n", 100.0 * f.target_accuracy, epochs_run,
                100.0 * target->best());
  if (!f.checkpoint_dir.empty()) {
    model.save_checkpoint(f.checkpoint_dir + "/final.safetensors");
    io::write_file_atomically(f.checkpoint_dir + "/checkpoint", "final.safetensors\n");
  }
  if (!f.report.empty()) {
    nlohmann::json r = {
        {"model", f.common.model},
        {"dataset", f.common.dataset},
        {"strategy", strategy->name()},
        {"replicas", strategy->num_replicas_in_sync()},
        {"optimizer", optimizer_name},
        {"optimizer_settings", run_config_optimizer},
        {"initial_learning_rate", initial_learning_rate},
        {"seed", f.common.seed},
        {"threads", {{"ceiling", num_threads()}, {"usable_cores", usable_cores()}}},
        {"tandem_version", TANDEM_VERSION},
        {"epochs", epochs_run},
        {"global_batch", f.common.batch_size},
        {"wall_seconds", wall},
        {"training_seconds", train_seconds},
        {"training_samples_per_second",
         epochs_run > 0 && train_seconds > 0 ? train_rows * epochs_run / train_seconds : 0.0},
        {"final_training_loss", history.history.count("loss") ? history["loss"].back() : NAN},
        {"test_loss", log_value(test, "loss")},
        {"test_accuracy", log_value(test, "accuracy")},
        {"peak_rss_mb", peak_rss_mb()},
    };
    if (target) {
      r["target_accuracy"] = f.target_accuracy;
      r["best_test_accuracy"] = target->best();
      r["seconds_to_target"] = target->reached() ? nlohmann::json(target->seconds_to_target()) : nlohmann::json();
      r["epochs_to_target"] = target->reached() ? nlohmann::json(target->epoch_of_target()) : nlohmann::json();
    }
    for (const auto& [name, values] : history.history)
      if (name == "staleness" || name == "max_staleness" || name == "dropped") r[name] = values;  // per epoch
    for (const auto& [name, counts] : strategy->extended().report_counts()) {
      nlohmann::json by = nlohmann::json::object();
      for (auto [key, count] : counts) by[std::to_string(key)] = count;
      r[name] = by;
    }
    io::write_file_atomically(f.report, r.dump(2) + "\n");
  }
}

}  // namespace

void add_fit(CLI::App& app) {
  auto flags = std::make_shared<FitFlags>();
  CLI::App* cmd = app.add_subcommand("fit", "train a model and evaluate it on the test split");
  flags->common.add_to(*cmd);
  cmd->add_option("--epochs", flags->epochs, "epochs to train")->capture_default_str()->check(CLI::Range(1, 1000000));
  cmd->add_option("--optimizer", flags->optimizer,
                  "sgd, adam, rmsprop or adagrad (default: the model's: adam; sgd for mlp5)")
      ->check(CLI::IsMember({"sgd", "adam", "rmsprop", "adagrad"}));
  cmd->add_option("--learning-rate", flags->learning_rate, "learning rate (0: the optimizer's default)")
      ->capture_default_str()
      ->check(finite_number & CLI::Range(0.0f, 100.0f));
  cmd->add_option("--momentum", flags->momentum, "momentum for sgd and rmsprop (-1: the model's default)")
      ->capture_default_str()
      ->check(finite_number & CLI::Range(-1.0f, 0.999f));
  cmd->add_option("--lr-decay", flags->lr_decay, "multiply the learning rate by this every epoch (exponential decay)")
      ->capture_default_str()
      ->check(finite_number & CLI::Range(0.01f, 1.0f));
  cmd->add_option("--validation-split", flags->validation_split,
                  "fraction of the training data held out for validation")
      ->capture_default_str()
      ->check(finite_number & CLI::Range(0.0, 0.99));
  cmd->add_option("--run-dir", flags->run_dir,
                  "the run's directory: its checkpoints and logs; naming an interrupted run's directory resumes it "
                  "(default: a new runs/<model>-N)");
  cmd->add_option(
      "--checkpoint-dir", flags->checkpoint_dir,
      "checkpoints per epoch, the backup an interrupted run resumes from, and final.safetensors (\"\": none; "
      "default: <run-dir>/checkpoints)");
  cmd->add_option("--backup-every", flags->backup_every, "steps between backups (0: at epoch ends only)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--log-dir", flags->log_dir, "TensorBoard log directory (\"\": none; default: <run-dir>/logs)");
  cmd->add_option("--log-every", flags->log_every, "steps between batch scalars in TensorBoard (0: per epoch only)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--csv-log", flags->csv_log, "CSV file with one row per epoch (default: none)")
      ->capture_default_str();
  cmd->add_option("--early-stopping", flags->early_stopping, "stop after this many epochs without improvement (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--report", flags->report, "write a JSON summary of the run to this file (default: none)")
      ->capture_default_str();
  cmd->add_option("--strategy", flags->strategy, strategy_help())->capture_default_str();
  cmd->add_option("--cluster", flags->cluster,
                  for_strategies("cluster",
                                 "a file holding the cluster spec as TF_CONFIG's JSON (default: the "
                                 "TF_CONFIG environment variable, as with TensorFlow), or slurm[:chief=1,worker=W,ps=P"
                                 "[,port_base=8888][,tasks_per_node=N][,gpus_per_node=G][,gpus_per_task=T]"
                                 "[,auto_set_gpu=0]]: the tasks of this srun step, each its role as TensorFlow's "
                                 "SlurmClusterResolver gives it"))
      ->check([](const std::string& value) {
        bool slurm = value == "slurm" || value.starts_with("slurm:");
        return slurm || std::filesystem::is_regular_file(value)
                   ? std::string()
                   : "no such file \"" + value + "\" (expected a TF_CONFIG JSON file, or slurm[:...])";
      });
  cmd->add_option("--shard-mb", flags->shard_mb,
                  for_strategies("shard-mb",
                                 "split a variable larger than this many MiB into shards over the "
                                 "servers (0: each variable whole on one server)"))
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--prefetch", flags->prefetch,
                for_strategies("prefetch",
                               "asynchronous, each worker asks for the next step's variables right "
                               "after its push (more samples/s, gradients about one update staler)"));
  cmd->add_option("--auth", flags->auth,
                  for_strategies("auth",
                                 "encrypt and authenticate every connection with the CurveZMQ keys in this "
                                 "directory (`tandem keys DIR` makes them); servers admit only the public "
                                 "keys in DIR/allowed"));
  cmd->add_flag("--insecure", flags->insecure,
                for_strategies("insecure",
                               "a network you trust: let the chief and the servers listen on non-loopback "
                               "addresses without --auth, or MPI's ranks run on several machines"));
  cmd->add_option("--record", flags->record,
                  for_strategies("record",
                                 "asynchronous, write to this file, at each epoch's end, which worker "
                                 "took each step and the order in which the servers answered pulls and "
                                 "applied pushes (for --replay)"));
  cmd->add_option("--replay", flags->replay,
                  for_strategies("replay",
                                 "run again the run that --record wrote this file for, forcing its "
                                 "order: the final weights are bitwise the recorded run's"));
  cmd->add_option("--min-workers", flags->min_workers,
                  for_strategies("min-workers",
                                 "synchronous rounds, a worker that dies is dropped from them; the "
                                 "job ends when fewer than this many are left"))
      ->capture_default_str();
  cmd->add_option("--device-memory", flags->device_memory,
                  for_strategies("device-memory",
                                 "each device's memory for the variables and optimizer slots "
                                 "(64MB, 1.5GB, 500KB or bytes): a model that needs more on a "
                                 "device is refused before training"));
  cmd->add_option("--target-accuracy", flags->target_accuracy,
                  "evaluate on the test split after every epoch and say how many training seconds it took to "
                  "first reach this test accuracy (a fraction: 0.98; 0: no such evaluation)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--timeout", flags->timeout,
                  "seconds a process of a multi-process job waits for the others (a dead, stopped or stuck one) "
                  "before every process stops, naming it")
      ->capture_default_str()
      ->check(finite_number & CLI::Range(0.1, 86400.0));
  cmd->add_option("--fusion-mb", flags->fusion_mb,
                  "tensor fusion: all-reduce gradients in buckets of this many MiB while backward goes on (0: one "
                  "all-reduce after backward)")
      ->capture_default_str()
      ->check(finite_number & CLI::Range(0.0, 4096.0));
  cmd->add_option("--cycle-time-ms", flags->cycle_time_ms,
                  "with --fusion-mb: also send a bucket once its first gradient has waited this long (timed on the "
                  "first step; 0: off)")
      ->capture_default_str()
      ->check(finite_number & CLI::Range(0.0, 10000.0));
  cmd->add_option("--compression", flags->compression, "gradients on the wire: none, fp16 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp16", "bf16"}));
  cmd->add_option("--timeline", flags->timeline,
                  "write a Chrome trace of every step (forward, backward, all-reduce, wait, update) to this file "
                  "(one per worker: NAME.rankR.json)");
  cmd->add_flag("--overwrite", flags->overwrite,
                "replace the checkpoints of an earlier, finished run in --checkpoint-dir");
  cmd->add_option("--verbose", flags->verbose, "0 silent, 1 progress bar, 2 one line per epoch and the thread choice")
      ->capture_default_str()
      ->check(CLI::Range(0, 2));
  cmd->callback([flags, cmd] {
    flags->checkpoint_dir_given = cmd->get_option("--checkpoint-dir")->count() > 0;
    flags->log_dir_given = cmd->get_option("--log-dir")->count() > 0;
    run_fit(*flags);
  });
}

}  // namespace tandem::cli
