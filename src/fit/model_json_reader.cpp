// Keras model files read into a Sequential (tandem/model_json.h): every key of a layer's config
// is honoured or must hold Keras' default, so that nothing in a file is silently ignored.
#include <array>
#include <cctype>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "fit/keras_json.h"
#include "tandem/model_json.h"

namespace tandem {
namespace model_json {
namespace {

using namespace layers;
using nlohmann::json;

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
    return model_json::get<T>(config_, key, fallback, where_);
  }
  Size2 size(const char* key, Size2 fallback) {
    read_.insert(key);
    return size2(config_, key, fallback, where_);
  }
  bool has(const char* key) const { return config_.contains(key) && !config_[key].is_null(); }
  // ZeroPadding2D's padding: n, [h, w] or [[top, bottom], [left, right]].
  std::array<int64_t, 4> zero_padding(const char* key) {
    read_.insert(key);
    if (!has(key)) return {1, 1, 1, 1};
    const json& v = config_[key];
    auto count = [](const json& e) { return e.is_number_integer() && e.get<int64_t>() >= 0; };
    if (count(v)) return {v.get<int64_t>(), v.get<int64_t>(), v.get<int64_t>(), v.get<int64_t>()};
    if (v.is_array() && v.size() == 2 && count(v[0]) && count(v[1]))
      return {v[0].get<int64_t>(), v[0].get<int64_t>(), v[1].get<int64_t>(), v[1].get<int64_t>()};
    if (v.is_array() && v.size() == 2 && v[0].is_array() && v[1].is_array() && v[0].size() == 2 && v[1].size() == 2 &&
        count(v[0][0]) && count(v[0][1]) && count(v[1][0]) && count(v[1][1]))
      return {v[0][0].get<int64_t>(), v[0][1].get<int64_t>(), v[1][0].get<int64_t>(), v[1][1].get<int64_t>()};
    fail("{}: \"{}\" is {}, expected n, [rows, columns] or [[top, bottom], [left, right]] of counts", where_, key,
         v.dump());
  }
  // Keras' ReLU layer's arguments: Tandem's is the plain one (no max_value, negative_slope 0, threshold 0).
  void relu_defaults() {
    for (const char* key : {"max_value", "negative_slope", "threshold"}) {
      read_.insert(key);
      if (!has(key)) continue;
      const json& v = config_[key];
      bool plain = std::string(key) != "max_value" && v.is_number() && v.get<double>() == 0.0;
      if (!plain)
        fail("{}: \"{}\" is {}; Tandem's ReLU is max(x, 0) ({})", where_, key, v.dump(),
             std::string(key) == "max_value" ? "null" : "0");
    }
  }
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
  // A regularizer as Keras writes it: {"class_name": "L2", "config": {"l2": 0.01}} (L1, L2, L1L2;
  // Keras 3 adds "module"), a name ("l1", "l2", "l1_l2": Keras' 0.01), or null for none.
  Regularizer regularizer(const char* key) {
    read_.insert(key);
    if (!has(key)) return {};
    const json& v = config_[key];
    if (v.is_string()) {
      std::string n = v.get<std::string>();
      if (n == "l1") return {.l1 = 0.01f};
      if (n == "l2") return {.l2 = 0.01f};
      if (n == "l1_l2") return {.l1 = 0.01f, .l2 = 0.01f};
      fail("{}: \"{}\" is \"{}\", expected \"l1\", \"l2\" or \"l1_l2\"", where_, key, n);
    }
    std::string kind = v.is_object() && v.contains("class_name") && v["class_name"].is_string()
                           ? v["class_name"].get<std::string>()
                           : "";
    if (kind != "L1" && kind != "L2" && kind != "L1L2")
      fail("{}: \"{}\" is {}; Tandem implements the regularizers L1, L2 and L1L2", where_, key, v.dump());
    const json config = v.contains("config") && v["config"].is_object() ? v["config"] : json::object();
    for (const auto& [k, value] : config.items())
      if ((k != "l1" || kind == "L2") && (k != "l2" || kind == "L1"))
        fail("{}: \"{}\" ({}) has an unknown argument \"{}\"", where_, key, kind, k);
    std::string at = fmt::format("{} ({})", where_, key);
    float fallback = kind == "L1L2" ? 0.0f : 0.01f;  // Keras' L1L2() is 0 and 0, L1() and L2() 0.01
    return {.l1 = kind == "L2" ? 0.0f : model_json::get<float>(config, "l1", fallback, at),
            .l2 = kind == "L1" ? 0.0f : model_json::get<float>(config, "l2", fallback, at)};
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
      for (const char* k : {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint",
                            "beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint",
                            "noise_shape", "seed", "lora_rank", "quantization_config"})
        t[k] = {null, "null"};
      // Keras 3's InputLayer writes "optional": false.
      t["optional"] = {[](const json& v) { return v.is_boolean() && !v.get<bool>(); }, "false"};
      t["dtype"] = {[](const json& v) {
                      if (v.is_string()) return v.get<std::string>() == "float32";
                      return v.is_object() && v.contains("config") && v["config"].is_object() &&
                             model_json::text_at(v["config"], "name") == "float32";  // Keras 3's DTypePolicy
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

}  // namespace
}  // namespace model_json

using model_json::get;
using model_json::LayerConfig;
using nlohmann::json;
using namespace layers;

std::optional<Shape> model_json::shape_of(const json& config, const std::string& file) {
  for (const char* key : {"input_shape", "batch_input_shape", "batch_shape"}) {
    if (!config.contains(key)) continue;
    const json& s = config[key];
    if (!s.is_array()) fail("{}: \"{}\" must be an array", file, key);
    Shape shape;
    size_t first = std::string(key) == "input_shape" ? 0 : 1;  // drops the batch dimension (null)
    for (size_t i = first; i < s.size(); ++i) {
      if (!s[i].is_number_integer() || s[i].get<int64_t>() <= 0)
        fail("{}: \"{}\" holds {}, expected positive sizes", file, key, s.dump());
      shape.push_back(s[i].get<int64_t>());
    }
    return shape;
  }
  return std::nullopt;
}

std::shared_ptr<Layer> model_json::layer_from_keras(const json& layer, const std::string& where,
                                                    const std::optional<Shape>& input) {
  if (!layer.is_object() || !layer.contains("class_name") || !layer["class_name"].is_string())
    fail("{}: needs \"class_name\" (a string)", where);
  std::string type = layer["class_name"].get<std::string>();
  json raw = layer.contains("config") ? layer["config"] : json::object();
  if (!raw.is_object()) fail("{}: \"config\" is {}, expected an object", where, raw.dump());
  std::string name = get<std::string>(raw, "name", "", where);
  LayerConfig c(raw, fmt::format("{} (\"{}\", {})", where, name, type));
  if (type == "InputLayer") {
    for (const char* key : {"batch_shape", "sparse", "ragged", "trainable"}) c.mark_read(key);
    c.check_rest();
    return nullptr;
  }
  std::shared_ptr<Layer> made;
  if (type == "Dense") {
    made = std::make_shared<Dense>(
        c.get<int64_t>("units", 0), c.activation("activation"),
        DenseOptions{.use_bias = c.get<bool>("use_bias", true),
                     .kernel_initializer = c.initializer("kernel_initializer", "glorot_uniform"),
                     .bias_initializer = c.initializer("bias_initializer", "zeros"),
                     .name = name,
                     .input_shape = input});
  } else if (type == "Dropout") {
    made = std::make_shared<Dropout>(c.get<float>("rate", 0.0f), DropoutOptions{.name = name, .input_shape = input});
  } else if (type == "Flatten") {
    made = std::make_shared<Flatten>(FlattenOptions{.name = name, .input_shape = input});
  } else if (type == "Conv2D") {
    made = std::make_shared<Conv2D>(
        c.get<int64_t>("filters", 0), c.size("kernel_size", Size2(3)),
        Conv2DOptions{.strides = c.size("strides", Size2(1)),
                      .padding = c.get<std::string>("padding", "valid"),
                      .activation = c.activation("activation"),
                      .use_bias = c.get<bool>("use_bias", true),
                      .kernel_initializer = c.initializer("kernel_initializer", "glorot_uniform"),
                      .bias_initializer = c.initializer("bias_initializer", "zeros"),
                      .name = name,
                      .input_shape = input});
  } else if (type == "MaxPooling2D" || type == "AveragePooling2D") {
    Pooling2DOptions o{.padding = c.get<std::string>("padding", "valid"), .name = name, .input_shape = input};
    Size2 pool = c.size("pool_size", Size2(2));
    if (c.has("strides")) o.strides = c.size("strides", pool);
    c.mark_read("strides");
    if (type == "MaxPooling2D") made = std::make_shared<MaxPooling2D>(pool, o);
    else made = std::make_shared<AveragePooling2D>(pool, o);
  } else if (type == "GlobalAveragePooling2D") {
    made = std::make_shared<GlobalAveragePooling2D>(
        GlobalPooling2DOptions{.keepdims = c.get<bool>("keepdims", false), .name = name, .input_shape = input});
  } else if (type == "ZeroPadding2D") {
    made = std::make_shared<ZeroPadding2D>(c.zero_padding("padding"),
                                           ZeroPadding2DOptions{.name = name, .input_shape = input});
  } else if (type == "BatchNormalization") {
    for (auto [init, only] : {std::pair{"beta_initializer", "zeros"}, std::pair{"moving_mean_initializer", "zeros"},
                              std::pair{"gamma_initializer", "ones"}, std::pair{"moving_variance_initializer", "ones"}})
      if (InitializerSpec v = c.initializer(init, only); v.name != only || !v.args.empty())
        fail("{}: \"{}\" is {}; Tandem implements only {}", c.where(), init, c.raw()[init].dump(), only);
    made = std::make_shared<BatchNormalization>(
        BatchNormalizationOptions{.momentum = c.get<float>("momentum", 0.99f),
                                  .epsilon = c.get<float>("epsilon", 1e-3f),
                                  .synchronized = c.get<bool>("synchronized", false),
                                  .name = name,
                                  .input_shape = input});
  } else if (type == "Activation") {
    made = std::make_shared<layers::Activation>(c.activation("activation"),
                                                ActivationOptions{.name = name, .input_shape = input});
  } else if (type == "ReLU") {
    c.relu_defaults();
    made = std::make_shared<ReLU>(ActivationOptions{.name = name, .input_shape = input});
  } else if (type == "Add" || type == "Subtract" || type == "Multiply" || type == "Concatenate") {
    if (input) fail("{}: a merge layer takes its inputs' shapes from the graph, not an input shape", c.where());
    if (type == "Add") made = std::make_shared<Add>(name);
    else if (type == "Subtract") made = std::make_shared<Subtract>(name);
    else if (type == "Multiply") made = std::make_shared<Multiply>(name);
    else made = std::make_shared<Concatenate>(c.get<int>("axis", -1), name);
  } else {
    fail(
        "{}: unknown layer class \"{}\"; expected Dense, Dropout, Flatten, Conv2D, MaxPooling2D, AveragePooling2D, "
        "GlobalAveragePooling2D, ZeroPadding2D, BatchNormalization, Activation, ReLU, Add, Subtract, Multiply, "
        "Concatenate or InputLayer",
        where, type);
  }
  made->set_trainable(c.get<bool>("trainable", true));  // a frozen layer stays frozen
  Layer::Regularizers regularizers{.activity = c.regularizer("activity_regularizer")};
  if (type == "Dense" || type == "Conv2D") {
    regularizers.kernel = c.regularizer("kernel_regularizer");
    regularizers.bias = c.regularizer("bias_regularizer");
  }
  made->set_regularizers(regularizers);
  // A mixed-precision dtype policy: Keras 2's {"class_name": "Policy", "config": {"name": …}},
  // Keras 3's DTypePolicy alike, or the name alone.
  if (c.has("dtype")) {
    const json& d = raw["dtype"];
    std::string policy = d.is_string() ? d.get<std::string>()
                         : d.is_object() && d.contains("config") && d["config"].is_object()
                             ? model_json::text_at(d["config"], "name")
                             : "";
    if (policy == "mixed_bfloat16" || policy == "mixed_float16") {
      c.mark_read("dtype");
      made->set_dtype_policy(policy);  // mixed_float16 is refused, naming the layer
    }
  }
  c.check_rest();
  return made;
}

// Keras' model.to_json() layout: {"class_name": "Sequential", "config": {"layers": [...]}}, or
// just {"layers": [...]}; each layer {"class_name": "Dense", "config": {...}}. A functional model
// ("Functional", or a config with "input_layers"): model_json::functional_from_json.
std::unique_ptr<Model> model_from_json(const std::string& text, const ModelJsonOptions& options) {
  const std::string& file = options.source;
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("{} is not valid JSON (byte {}): {}", file, e.byte, e.what());
  } catch (const json::exception& e) {  // a number past a double's range, as fuzz_model_json found
    fail("{} is not valid JSON: {}", file, e.what());
  }
  if (!doc.is_object()) fail("{} must be a JSON object, not {}", file, doc.type_name());
  const json& root = doc.contains("config") && doc["config"].is_object() ? doc["config"] : doc;
  if (!root.contains("layers") || !root["layers"].is_array() || root["layers"].empty())
    fail("{} needs a non-empty \"layers\" array", file);
  std::string cls = model_json::text_at(doc, "class_name");
  if (cls == "Functional" || cls == "Model" || root.contains("input_layers"))
    return model_json::functional_from_json(root, options);
  if (!cls.empty() && cls != "Sequential")
    fail("{}: the model is a {}; Tandem reads Sequential and Functional models", file, cls);
  auto model =
      std::make_unique<Sequential>(SequentialOptions{get<std::string>(root, "name", "sequential", file), options.seed});
  int index = 0;
  bool first = true;                      // the first layer that computes: only its input shape counts
  std::optional<Shape> from_input_layer;  // Keras 3 gives the input shape on an InputLayer
  for (const json& layer : root["layers"]) {
    std::string where = fmt::format("{}, layer {}", file, index++);
    const json& raw = layer.is_object() && layer.contains("config") ? layer["config"] : json::object();
    auto input = raw.is_object() ? model_json::shape_of(raw, file) : std::nullopt;
    std::shared_ptr<Layer> made;
    bool input_layer = model_json::text_at(layer, "class_name") == "InputLayer";
    if (!input_layer) {
      if (auto given = std::exchange(from_input_layer, std::nullopt); !input) input = given;  // the next layer only
      // Keras 2 writes batch_input_shape on some later layers; Keras' Sequential uses the first
      // layer's alone, and so does this.
      if (!first && input) {
        if (options.ignored_input_shapes != nullptr)
          options.ignored_input_shapes->push_back({model->layers().size(), *input});
        input.reset();
      }
      first = false;
    }
    made = model_json::layer_from_keras(layer, where, input_layer ? std::nullopt : input);
    if (!made) {
      from_input_layer = input;
      continue;
    }
    model->add(made);
  }
  return model;
}

std::unique_ptr<Model> load_model_json(const std::string& path, ModelJsonOptions options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("model file \"{}\" cannot be opened", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (options.source.empty() || options.source == ModelJsonOptions{}.source)
    options.source = fmt::format("model file \"{}\"", path);
  return model_from_json(text, options);
}

}  // namespace tandem
