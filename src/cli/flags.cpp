// The flags several subcommands share: the model and data, threads, the optimizer by name.
#include <cmath>
#include <fstream>
#include <regex>

#include "cli/common.h"
#include "tandem/cuda.h"

namespace tandem::cli {

const CLI::Validator finite_number(
    [](std::string& v) {
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      return end != v.c_str() && std::isfinite(d) ? std::string() : "not a finite number: " + v;
    },
    "FINITE");

void CommonFlags::add_to(CLI::App& app, bool with_dataset) {
  app.add_option("--model", model, "preset (" + preset_names() + ") or a JSON model file")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return is_preset(v) || std::ifstream(v).good()
                       ? std::string()
                       : "not a preset (" + preset_names() + ") nor a readable JSON file: " + v;
          },
          "PRESET|FILE"));
  if (with_dataset) {
    app.add_option("--dataset", dataset, "dataset")
        ->capture_default_str()
        ->check(CLI::IsMember({"mnist", "fashion-mnist", "cifar10"}));
    app.add_option("--data-dir", data_dir,
                   "directory searched first for datasets, then $TANDEM_DATA, then ./data (default: none)")
        ->capture_default_str();
    app.add_option("--batch-size", batch_size, "batch size")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  }
  app.add_option("--threads", threads,
                 "most intra-op threads one op may use (0: automatic, OMP_NUM_THREADS or one per usable core); ops use "
                 "fewer when small or when other processes keep cores busy")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxThreads));
  app.add_option("--seed", seed, "seed for weights, shuffling and dropout")->capture_default_str();
  app.add_option("--precision", precision,
                 "float32, or mixed_bf16: the layers' matrix products in bf16 with float32 accumulation, variables, "
                 "loss and optimizer state float32 (Keras' mixed_bfloat16); float32 where the CPU lacks bf16 "
                 "instructions, with a note")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "mixed_bf16", "mixed_bfloat16"}));
  app.add_option("--device", device,
                 "where the model's layers live and run: cpu, or cuda (cuda:N, gpu, gpu:N) for an NVIDIA GPU, in a "
                 "build with CUDA")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return std::regex_match(v, std::regex("cpu|(cuda|gpu)(:[0-9]+)?")) ? std::string()
                                                                               : "not cpu, cuda or cuda:N: " + v;
          },
          "cpu|cuda[:N]"));
  app.add_flag("--tf32", tf32,
               "float32 products on the GPU's TF32 tensor cores (faster, operands rounded to 10 bits of mantissa; "
               "with --device cuda; TensorFlow's enable_tensor_float_32_execution)");
}

std::vector<Device> CommonFlags::gpus() const {
  if (device == "cpu") return {};
  if (!cuda::registered())
    fail("--device {}: this build of Tandem has no CUDA device (built without a CUDA toolkit)", device);
  auto colon = device.find(':');
  int count = cuda::device_count(), index = colon == std::string::npos ? -1 : std::stoi(device.substr(colon + 1));
  if (count == 0 || index >= count)
    fail("--device {}: {}", device,
         count == 0 ? "no GPU can be used here (" + cuda::why_none() + ")"
                    : fmt::format("this machine has {} GPU{} (cuda:0{})", count, count == 1 ? "" : "s",
                                  count == 1 ? "" : fmt::format(" to cuda:{}", count - 1)));
  if (index >= 0) return {Device::cuda(index)};
  std::vector<Device> all;
  for (int i = 0; i < count; ++i) all.push_back(Device::cuda(i));
  return all;
}

std::optional<DeviceScope> CommonFlags::place(const distribute::Strategy& strategy) const {
  if (device == "cpu" || !strategy.extended().replica_devices().empty()) return std::nullopt;
  if (strategy.num_replicas_in_sync() > 1)
    fail(
        "--device {}: a strategy of {} replicas ({}) on GPUs is not built yet but for mirrored:N (a replica per "
        "GPU); the default strategy trains on one GPU (docs/gpu.md)",
        device, strategy.num_replicas_in_sync(), strategy.name());
  return std::optional<DeviceScope>(std::in_place, gpus().front());
}

void CommonFlags::apply() const {
  if (threads > 0) set_num_threads(threads);
  if (tf32 && device == "cpu")
    fail("--tf32: TF32 products are a GPU's, and --device is cpu (the CPU's products are float32)");
  cuda::enable_tensor_float_32(tf32);
  mixed_precision::set_global_policy(precision == "float32" ? "float32" : "mixed_bfloat16");
}

std::string describe_parallelism(const distribute::Strategy* strategy, int threads_flag) {
  std::string text = describe_threads();
  if (strategy != nullptr && strategy->extended().threads_per_replica() > 0) {
    int replicas = strategy->num_replicas_in_sync(), per = strategy->extended().threads_per_replica(),
        cores = usable_cores();
    text += fmt::format("\nstrategy {}: {} replica{} × {} intra-op thread{} ({}){}", strategy->name(), replicas,
                        replicas == 1 ? "" : "s", per, per == 1 ? "" : "s",
                        threads_flag > 0 ? "--threads is per replica" : "usable cores ÷ replicas",
                        replicas * per > cores ? fmt::format("; {} threads on {} usable cores: they take turns, each "
                                                             "waiting without spinning",
                                                             replicas * per, cores)
                                               : std::string("; each replica pinned to its own cores"));
  }
  return text;
}

void warn_about_parallelism(const distribute::Strategy& strategy, int threads_flag) {
  int cores = usable_cores();
  if (threads_flag > cores)
    std::fprintf(stderr, "note: --threads %d exceeds the %d usable core%s: at most %d threads run at once\n",
                 threads_flag, cores, cores == 1 ? "" : "s", cores);
  if (strategy.num_replicas_in_sync() > cores)
    std::fprintf(stderr,
                 "note: %d replicas on %d usable core%s take turns on the cores: expect at most the speed of %d, "
                 "less as the replicas' hand-offs grow\n",
                 strategy.num_replicas_in_sync(), cores, cores == 1 ? "" : "s", cores);
}

void refuse_idle_replicas(const distribute::Strategy& strategy, const std::string& name, int64_t batch_size) {
  const distribute::StrategyEntry* entry = distribute::strategy_entry(name);
  int replicas = strategy.num_replicas_in_sync();
  if (entry == nullptr || entry->family != distribute::StrategyFamily::DataParallel || replicas <= batch_size) return;
  fail(
      "--strategy {}: {} replicas and a global batch of {} rows (--batch-size): {} replicas would have no rows to "
      "compute at any step; use at most {} replicas, or a batch of at least {} rows",
      name, replicas, batch_size, replicas - batch_size, batch_size, replicas);
}

OptimizerChoice choose_optimizer(const std::string& name, float learning_rate, float momentum, const ModelSpec& spec) {
  OptimizerChoice c;
  c.name = name.empty() ? spec.default_optimizer : name;
  float lr = learning_rate > 0.0f ? learning_rate : (name.empty() ? spec.default_learning_rate : 0.0f);
  c.momentum = momentum >= 0.0f ? momentum : (name.empty() ? spec.default_momentum : 0.0f);
  c.has_momentum = c.name == "sgd" || c.name == "rmsprop";
  if (c.name == "sgd") c.learning_rate = lr > 0 ? lr : 0.01f;
  else if (c.name == "adam" || c.name == "rmsprop" || c.name == "adagrad") c.learning_rate = lr > 0 ? lr : 0.001f;
  else fail("--optimizer: unknown optimizer \"{}\"; expected sgd, adam, rmsprop or adagrad", c.name);
  return c;
}

std::string OptimizerChoice::describe() const {
  return has_momentum ? fmt::format("--optimizer {} --learning-rate {} --momentum {}", name, learning_rate, momentum)
                      : fmt::format("--optimizer {} --learning-rate {}", name, learning_rate);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerChoice& c) {
  if (c.name == "sgd")
    return std::make_unique<optimizers::SGD>(c.learning_rate, optimizers::SGDOptions{.momentum = c.momentum});
  if (c.name == "adam") return std::make_unique<optimizers::Adam>(c.learning_rate);
  if (c.name == "rmsprop")
    return std::make_unique<optimizers::RMSprop>(c.learning_rate, optimizers::RMSpropOptions{.momentum = c.momentum});
  return std::make_unique<optimizers::Adagrad>(c.learning_rate);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    size_t next = text.find(separator, at);
    parts.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) return parts;
    at = next + 1;
  }
}

}  // namespace tandem::cli
