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
namespace {

using namespace layers;
using nlohmann::json;

std::optional<Shape> shape_of(const json& config, const std::string& file) {
  for (const char* key : {"input_shape", "batch_input_shape", "batch_shape"}) {
    if (!config.contains(key)) continue;
    const json& s = config[key];
    if (!s.is_array()) fail("model file \"{}\": \"{}\" must be an array", file, key);
    Shape shape;
    size_t first = std::string(key) == "input_shape" ? 0 : 1;  // drops the batch dimension (null)
    for (size_t i = first; i < s.size(); ++i) {
      if (!s[i].is_number_integer() || s[i].get<int64_t>() <= 0)
        fail("model file \"{}\": \"{}\" holds {}, expected positive sizes", file, key, s.dump());
      shape.push_back(s[i].get<int64_t>());
    }
    return shape;
  }
  return std::nullopt;
}

template <typename T>
T get(const json& config, const char* key, T fallback, const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  try {
    return config[key].get<T>();
  } catch (const json::exception&) {
    fail("{}: \"{}\" is {}, of the wrong type", where, key, config[key].dump());
  }
}

Size2 size2(const json& config, const char* key, Size2 fallback, const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  const json& v = config[key];
  if (v.is_number_integer()) return Size2(v.get<int64_t>());
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
    return Size2(v[0].get<int64_t>(), v[1].get<int64_t>());
  fail("{}: \"{}\" is {}, expected an integer or [height, width]", where, key, v.dump());
}

// A layer's config as read: every key is either read (and honoured) or one Tandem does not
// implement; those must hold Keras' default, or the file is refused naming the key and value, so
// that nothing in a model file is silently ignored.
class LayerConfig {
 public:
  LayerConfig(json config, std::string where) : config_(std::move(config)), where_(std::move(where)) {}
  const json& raw() const { return config_; }
  const std::string& where() const { return where_; }
  template <typename T>
  T get(const char* key, T fallback) {
    read_.insert(key);
    return cli::get<T>(config_, key, fallback, where_);
  }
  Size2 size(const char* key, Size2 fallback) {
    read_.insert(key);
    return size2(config_, key, fallback, where_);
  }
  bool has(const char* key) const { return config_.contains(key) && !config_[key].is_null(); }
  void mark_read(const char* key) { read_.insert(key); }
  // An initializer as a name ("he_normal") or Keras' object ({"class_name": "VarianceScaling",
  // "config": {"scale": 2.0, "mode": "fan_in", "seed": null}}), its arguments kept for the layer
  // to check. A seed is refused: weights follow the model's seed.
  InitializerSpec initializer(const char* key, const std::string& fallback) {
    read_.insert(key);
    if (!has(key)) return InitializerSpec(fallback);
    const json& v = config_[key];
    if (v.is_string()) return InitializerSpec(v.get<std::string>());
    if (!v.is_object() || !v.contains("class_name") || !v["class_name"].is_string())
      fail("{}: \"{}\" is {}, expected a name or {{\"class_name\": ..., \"config\": ...}}", where_, key, v.dump());
    std::string snake;  // GlorotUniform -> glorot_uniform
    for (char c : v["class_name"].get<std::string>()) {
      if (std::isupper(static_cast<unsigned char>(c)) && !snake.empty()) snake += '_';
      snake += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    InitializerSpec spec(snake);
    if (v.contains("config") && v["config"].is_object())
      for (const auto& [k, value] : v["config"].items()) {
        if (k == "seed" && value.is_null()) continue;
        if (k == "seed")
          fail("{}: \"{}\" sets a seed ({}); Tandem draws every weight from the model's seed (--seed)", where_, key,
               value.dump());
        spec.args[k] = value.is_string() ? value.get<std::string>() : value.dump();
      }
    return spec;
  }
  // An activation as a name ("relu") or an object: Keras 3's serialized function
  // ({"class_name": "function", "config": "relu"}) or a layer-like one ({"class_name": "ReLU", "config": {}}).
  std::string activation(const char* key) {
    read_.insert(key);
    if (!has(key)) return "";
    const json& v = config_[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("config") && v["config"].is_string()) return v["config"].get<std::string>();
    if (v.is_object() && v.contains("class_name") && v["class_name"].is_string() &&
        (!v.contains("config") || v["config"].is_null() || (v["config"].is_object() && v["config"].empty()))) {
      std::string name;
      for (char c : v["class_name"].get<std::string>())
        name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return name;
    }
    fail("{}: \"{}\" is {}, expected a name such as \"relu\" or an activation object without arguments", where_, key,
         v.dump());
  }
  // Every key not read must hold the value that means what Tandem does.
  void check_rest() const {
    for (const auto& [key, value] : config_.items()) {
      if (read_.count(key)) continue;
      auto it = defaults().find(key);
      if (it == defaults().end())
        fail("{}: unknown attribute \"{}\" ({}); Tandem would ignore it, so the file is refused", where_, key,
             value.dump());
      if (!it->second.first(value))
        fail("{}: \"{}\" is {}; Tandem implements only {}", where_, key, value.dump(), it->second.second);
    }
  }

 private:
  using Check = std::pair<bool (*)(const json&), const char*>;
  static const std::map<std::string, Check>& defaults() {
    static const std::map<std::string, Check> table = [] {
      auto null = [](const json& v) { return v.is_null(); };
      auto one = [](const json& v) {
        if (v.is_number_integer()) return v.get<int64_t>() == 1;
        if (!v.is_array()) return false;
        for (const json& e : v)
          if (!e.is_number_integer() || e.get<int64_t>() != 1) return false;
        return true;
      };
      std::map<std::string, Check> t;
      for (const char* k : {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                            "bias_constraint", "beta_regularizer", "gamma_regularizer", "beta_constraint",
                            "gamma_constraint", "noise_shape", "seed", "lora_rank"})
        t[k] = {null, "null"};
      t["trainable"] = {[](const json& v) { return v.is_boolean() && v.get<bool>(); }, "true"};
      t["dtype"] = {[](const json& v) {
                      if (v.is_string()) return v.get<std::string>() == "float32";
                      return v.is_object() && v.contains("config") && v["config"].is_object() &&
                             v["config"].value("name", "") == "float32";  // Keras 3's DTypePolicy
                    },
                    "\"float32\""};
      t["data_format"] = {
          [](const json& v) { return v.is_null() || (v.is_string() && v.get<std::string>() == "channels_last"); },
          "\"channels_last\""};
      t["dilation_rate"] = {one, "1 (no dilation)"};
      t["groups"] = {one, "1"};
      t["center"] = {[](const json& v) { return v.is_boolean() && v.get<bool>(); }, "true"};
      t["scale"] = {[](const json& v) { return v.is_boolean() && v.get<bool>(); }, "true"};
      t["axis"] = {[](const json& v) {
                     const json& a = v.is_array() && v.size() == 1 ? v[0] : v;
                     return a.is_number_integer() &&
                            (a.get<int64_t>() == -1 || a.get<int64_t>() == 1 || a.get<int64_t>() == 3);
                   },
                   "the last axis (-1)"};
      return t;
    }();
    return table;
  }

  json config_;
  std::string where_;
  std::set<std::string> read_{"name", "input_shape", "batch_input_shape", "batch_shape"};
};

// Keras' model.to_json() layout: {"class_name": "Sequential", "config": {"layers": [...]}}, or
// just {"layers": [...]}; each layer {"class_name": "Dense", "config": {...}}.
std::unique_ptr<Sequential> model_from_json(const std::string& file, uint64_t seed) {
  std::ifstream in(file);
  if (!in) fail("model file \"{}\" cannot be opened", file);
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::parse_error& e) {
    fail("model file \"{}\" is not valid JSON (byte {}): {}", file, e.byte, e.what());
  }
  const json& root = doc.contains("config") && doc["config"].is_object() ? doc["config"] : doc;
  if (!root.contains("layers") || !root["layers"].is_array() || root["layers"].empty())
    fail("model file \"{}\" needs a non-empty \"layers\" array", file);
  auto model =
      std::make_unique<Sequential>(SequentialOptions{get<std::string>(root, "name", "sequential", file), seed});
  int index = 0;
  std::optional<Shape> from_input_layer;  // Keras 3 gives the input shape on an InputLayer
  for (const json& layer : root["layers"]) {
    std::string where = fmt::format("model file \"{}\", layer {}", file, index++);
    if (!layer.is_object() || !layer.contains("class_name")) fail("{}: needs \"class_name\"", where);
    std::string type = layer["class_name"].get<std::string>();
    json raw = layer.contains("config") ? layer["config"] : json::object();
    std::string name = get<std::string>(raw, "name", "", where);
    LayerConfig c(raw, fmt::format("{} (\"{}\", {})", where, name, type));
    auto input = shape_of(raw, file);
    if (type == "InputLayer") {
      for (const char* key : {"batch_shape", "sparse", "ragged"}) c.mark_read(key);
      c.check_rest();
      from_input_layer = input;
      continue;
    }
    if (auto given = std::exchange(from_input_layer, std::nullopt); !input) input = given;  // for the next layer only
    if (type == "Dense") {
      model->add(Dense(c.get<int64_t>("units", 0), c.activation("activation"),
                       {.use_bias = c.get<bool>("use_bias", true),
                        .kernel_initializer = c.initializer("kernel_initializer", "glorot_uniform"),
                        .bias_initializer = c.initializer("bias_initializer", "zeros"),
                        .name = name,
                        .input_shape = input}));
    } else if (type == "Dropout") {
      model->add(Dropout(c.get<float>("rate", 0.0f), {.name = name, .input_shape = input}));
    } else if (type == "Flatten") {
      model->add(Flatten({.name = name, .input_shape = input}));
    } else if (type == "Conv2D") {
      model->add(Conv2D(c.get<int64_t>("filters", 0), c.size("kernel_size", Size2(3)),
                        {.strides = c.size("strides", Size2(1)),
                         .padding = c.get<std::string>("padding", "valid"),
                         .activation = c.activation("activation"),
                         .use_bias = c.get<bool>("use_bias", true),
                         .kernel_initializer = c.initializer("kernel_initializer", "glorot_uniform"),
                         .bias_initializer = c.initializer("bias_initializer", "zeros"),
                         .name = name,
                         .input_shape = input}));
    } else if (type == "MaxPooling2D" || type == "AveragePooling2D") {
      Pooling2DOptions o{.padding = c.get<std::string>("padding", "valid"), .name = name, .input_shape = input};
      Size2 pool = c.size("pool_size", Size2(2));
      if (c.has("strides")) o.strides = c.size("strides", pool);
      c.mark_read("strides");
      if (type == "MaxPooling2D") model->add(MaxPooling2D(pool, o));
      else model->add(AveragePooling2D(pool, o));
    } else if (type == "BatchNormalization") {
      for (auto [init, only] :
           {std::pair{"beta_initializer", "zeros"}, std::pair{"moving_mean_initializer", "zeros"},
            std::pair{"gamma_initializer", "ones"}, std::pair{"moving_variance_initializer", "ones"}})
        if (InitializerSpec v = c.initializer(init, only); v.name != only || !v.args.empty())
          fail("{}: \"{}\" is {}; Tandem implements only {}", c.where(), init, c.raw()[init].dump(), only);
      model->add(BatchNormalization({.momentum = c.get<float>("momentum", 0.99f),
                                     .epsilon = c.get<float>("epsilon", 1e-3f),
                                     .synchronized = c.get<bool>("synchronized", false),
                                     .name = name,
                                     .input_shape = input}));
    } else if (type == "Activation") {
      model->add(layers::Activation(c.activation("activation"), {.name = name, .input_shape = input}));
    } else {
      fail(
          "{}: unknown layer class \"{}\"; expected Dense, Dropout, Flatten, Conv2D, MaxPooling2D, AveragePooling2D, "
          "BatchNormalization or Activation",
          where, type);
    }
    c.check_rest();
  }
  return model;
}

}  // namespace

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
    spec.model = model_from_json(name, seed);
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

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, float learning_rate, float momentum,
                                          const ModelSpec& spec) {
  std::string n = name.empty() ? spec.default_optimizer : name;
  float lr = learning_rate > 0.0f ? learning_rate : (name.empty() ? spec.default_learning_rate : 0.0f);
  float mom = momentum >= 0.0f ? momentum : (name.empty() ? spec.default_momentum : 0.0f);
  if (n == "sgd")
    return std::make_unique<optimizers::SGD>(lr > 0 ? lr : 0.01f, optimizers::SGDOptions{.momentum = mom});
  if (n == "adam") return std::make_unique<optimizers::Adam>(lr > 0 ? lr : 0.001f);
  if (n == "rmsprop")
    return std::make_unique<optimizers::RMSprop>(lr > 0 ? lr : 0.001f, optimizers::RMSpropOptions{.momentum = mom});
  if (n == "adagrad") return std::make_unique<optimizers::Adagrad>(lr > 0 ? lr : 0.001f);
  fail("--optimizer: unknown optimizer \"{}\"; expected sgd, adam, rmsprop or adagrad", n);
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
