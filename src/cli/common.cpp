#include "cli/common.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

namespace tandem::cli {

using namespace layers;

bool is_preset(const std::string& name) {
  return name == "mlp" || name == "mlp5" || name == "cnn" || name == "cifar-mlp";
}
std::string preset_names() { return "mlp, mlp5, cnn, cifar-mlp"; }

ModelSpec make_model(const std::string& name, uint64_t seed, distribute::Strategy* strategy) {
  std::optional<distribute::Strategy::Scope> scope;
  if (strategy) scope.emplace(strategy);
  ModelSpec spec;
  spec.name = name;
  spec.model = std::make_unique<Sequential>(SequentialOptions{.name = name, .seed = seed});
  Sequential& m = *spec.model;
  if (name == "mlp") {  // reference tutorials 000 and 002
    m.add(Dense(128, "relu", {.input_shape = Shape{784}}));
    m.add(Dropout(0.2f));
    m.add(Dense(10, "softmax"));
  } else if (name == "mlp5") {  // reference tutorial 004: 5 x Dense(160, elu), momentum 0.95
    m.add(Dense(160, "elu", {.kernel_initializer = "he_normal", .input_shape = Shape{784}}));
    for (int i = 0; i < 4; ++i) m.add(Dense(160, "elu", {.kernel_initializer = "he_normal"}));
    m.add(Dense(10));
    spec.default_optimizer = "sgd";
    spec.default_learning_rate = 0.01f;
    spec.default_momentum = 0.95f;
    spec.loss = Loss::sparse_categorical_crossentropy(true);
  } else if (name == "cnn") {  // reference tutorial 001
    m.add(Conv2D(32, 3, {.activation = "relu", .input_shape = Shape{28, 28, 1}}));
    m.add(MaxPooling2D());
    m.add(Flatten());
    m.add(Dense(64, "relu"));
    m.add(Dense(10));
    spec.loss = Loss::sparse_categorical_crossentropy(true);
  } else if (name == "cifar-mlp") {  // reference tutorial 003
    m.add(Flatten({.input_shape = Shape{32, 32, 3}}));
    m.add(Dense(3000, "relu"));
    m.add(Dense(1000, "relu"));
    m.add(Dense(10, "sigmoid"));
  } else {
    spec.model = load_model_json(name, {.seed = seed, .ignored_input_shapes = &spec.ignored_input_shapes});
    // Logits when the model ends without an activation, probabilities otherwise, however the
    // activation is spelled: Dense(10, "softmax") or Dense(10) then Activation("softmax").
    const Layer* last = spec.model->layers().back().get();
    tandem::Activation output = tandem::Activation::Linear;
    if (const auto* dense = dynamic_cast<const Dense*>(last)) output = dense->activation();
    if (const auto* activation = dynamic_cast<const layers::Activation*>(last)) output = activation->activation();
    if (output == tandem::Activation::Linear) spec.loss = Loss::sparse_categorical_crossentropy(true);
  }
  return spec;
}

void note_ignored_input_shapes(const ModelSpec& spec) {
  const auto& layers = spec.model->layers();
  for (const IgnoredInputShape& ignored : spec.ignored_input_shapes) {
    const Layer& layer = *layers[ignored.layer];
    if (layer.built() && layer.input_shape() == ignored.declared) continue;
    std::printf("note: %s in %s declares input shape %s, and its input is %s: ignored, as Keras uses the first "
                "layer's alone\n",
                layer.label().c_str(), spec.name.c_str(), ignored.declared.str().c_str(),
                layer.built() ? layer.input_shape().str().c_str() : "not known yet");
  }
}

data::ImageDataset load_for_model(const std::string& dataset, const std::string& data_dir, Sequential& model) {
  const auto& declared = model.layers().front()->declared_input_shape();
  if (!declared) fail("model \"{}\": its first layer needs an input_shape", model.name());
  bool flat = declared->rank() == 1, channels = declared->rank() == 3;
  data::ImageDataset d;
  if (dataset == "cifar10") {
    d = data::load_cifar10(data_dir);
    if (flat)
      for (data::Split* s : {&d.train, &d.test}) s->x = s->x.reshape({s->x.dim(0), 32 * 32 * 3});
  } else {
    d = data::load_dataset(dataset, {.data_dir = data_dir, .flatten = flat, .channels = channels});
  }
  Shape per_sample(std::span<const int64_t>(d.train.x.shape().begin() + 1, d.train.x.shape().end()));
  if (!(per_sample == *declared))
    fail("dataset \"{}\" has samples of shape {}, model \"{}\" expects {}", dataset, per_sample.str(), model.name(),
         declared->str());
  return d;
}

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
}

void CommonFlags::apply_threads() const {
  if (threads > 0) set_num_threads(threads);
}

std::string describe_parallelism(const distribute::Strategy* strategy, int threads_flag) {
  std::string text = describe_threads();
  if (const auto* mirrored = dynamic_cast<const distribute::MirroredStrategy*>(strategy)) {
    int replicas = mirrored->num_replicas_in_sync(), per = mirrored->threads_per_replica(), cores = usable_cores();
    text += fmt::format("\nstrategy {}: {} replica{} × {} intra-op thread{} ({}){}", mirrored->name(), replicas,
                        replicas == 1 ? "" : "s", per, per == 1 ? "" : "s",
                        threads_flag > 0 ? "--threads is per replica" : "usable cores ÷ replicas",
                        replicas * per > cores ? fmt::format("; {} threads on {} usable cores: they take turns, each "
                                                             "waiting without spinning",
                                                             replicas * per, cores)
                                               : std::string("; each replica pinned to its own cores"));
  }
  return text;
}

void warn_about_parallelism(const distribute::Strategy* strategy, int threads_flag) {
  int cores = usable_cores();
  if (threads_flag > cores)
    std::fprintf(stderr, "note: --threads %d exceeds the %d usable core%s: at most %d threads run at once\n",
                 threads_flag, cores, cores == 1 ? "" : "s", cores);
  if (strategy != nullptr && strategy->num_replicas_in_sync() > cores)
    std::fprintf(stderr,
                 "note: %d replicas on %d usable core%s take turns on the cores: expect about the speed of %d\n",
                 strategy->num_replicas_in_sync(), cores, cores == 1 ? "" : "s", cores);
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

std::optional<int> run_command(std::vector<std::string> args, std::string* output, double timeout_s) {
  int out[2] = {-1, -1};
  if (output != nullptr && pipe(out) != 0) fail("cannot make a pipe: {}", std::strerror(errno));
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) fail("cannot start {}: {}", args[0], std::strerror(errno));
  if (pid == 0) {
    if (output != nullptr) {
      dup2(out[1], 1);
      dup2(out[1], 2);
      close(out[0]);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  if (output != nullptr) close(out[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    if (output != nullptr) {
      pollfd p{out[0], POLLIN, 0};
      char buffer[512];
      ssize_t n = poll(&p, 1, 50) > 0 ? read(out[0], buffer, sizeof buffer) : 0;
      if (n > 0 && output->size() < 4096) output->append(buffer, static_cast<size_t>(n));
    } else if (timeout_s > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (waitpid(pid, &status, output == nullptr && timeout_s <= 0 ? 0 : WNOHANG) == pid) break;
    if (timeout_s > 0 && std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      if (output != nullptr) close(out[0]);
      return std::nullopt;
    }
  }
  if (output != nullptr) {
    close(out[0]);
    while (!output->empty() && (output->back() == '\n' || output->back() == '\r')) output->pop_back();
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

}  // namespace tandem::cli
