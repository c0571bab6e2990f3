// Keras 3's config.json for a Sequential (what keras.saving.serialize_keras_object writes:
// "module", "class_name", "config", "registered_name", "build_config", "compile_config"), made
// from to_json's layers, and a compile_config read back into compile().
#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "tandem/graph.h"
#include "tandem/model_json.h"

namespace tandem {
namespace {

using nlohmann::json;

json dtype_policy(const std::string& name) {
  return {
      {"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", name}}}, {"registered_name", nullptr}};
}

json batch_shape(const Shape& per_sample) {
  json s = json::array({nullptr});
  for (int64_t d : per_sample) s.push_back(d);
  return s;
}

// A float hyperparameter as Keras prints it (1e-07, not 1.0000000116860974e-07).
double shortest(double v) { return std::stod(fmt::format("{}", static_cast<float>(v))); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// "sparse_categorical_crossentropy" <-> "SparseCategoricalCrossentropy"
std::string camel(const std::string& snake) {
  std::string out;
  bool upper = true;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}
std::string snake(const std::string& camel_name) {
  std::string out;
  for (char c : camel_name) {
    if (std::isupper(static_cast<unsigned char>(c)) && !out.empty()) out += '_';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

json compile_config(const Model& model, Optimizer& optimizer) {
  const std::string cls = optimizer.name();  // "SGD", "Adam", "AdamW", "RMSprop", "Adagrad": Keras' class names
  auto or_null = [](float v) { return v > 0.0f ? json(shortest(v)) : json(nullptr); };
  const GradientClipping& clip = optimizer.clipping();
  json config = {{"name", cls == "SGD" ? cls : lower(cls)},  // Keras 3's default names: "SGD", "adam", ...
                 {"learning_rate", shortest(optimizer.current_learning_rate())},
                 {"weight_decay", or_null(optimizer.weight_decay())},
                 {"clipnorm", or_null(clip.clipnorm)},
                 {"global_clipnorm", or_null(clip.global_clipnorm)},
                 {"clipvalue", or_null(clip.clipvalue)},
                 {"use_ema", false},
                 {"ema_momentum", 0.99},
                 {"ema_overwrite_frequency", nullptr}};
  for (const auto& [key, value] : optimizer.config()) {
    if (key == "nesterov") config[key] = value != 0.0;
    else config[key] = shortest(value);
  }
  if (cls == "Adam" || cls == "AdamW") config["amsgrad"] = false;
  if (cls == "RMSprop") config["centered"] = false;
  auto loss_json = [](const Loss& l) {
    if (!l.from_logits() && l.label_smoothing() == 0.0f) return json(l.name());
    return json{{"module", "keras.losses"},
                {"class_name", camel(l.name())},
                {"config",
                 {{"name", l.name()},
                  {"reduction", "sum_over_batch_size"},
                  {"from_logits", l.from_logits()},
                  {"label_smoothing", shortest(l.label_smoothing())}}},
                {"registered_name", nullptr}};
  };
  json loss = loss_json(model.loss()), loss_weights = nullptr;
  if (const std::vector<LossOutput>* parts = model.loss().parts()) {  // a list, one per output
    loss = loss_weights = json::array();
    for (const LossOutput& o : *parts) {
      loss.push_back(loss_json(o.loss));
      loss_weights.push_back(shortest(o.weight));
    }
  }
  json metrics = model.metric_names().empty() ? json(nullptr) : json(model.metric_names());
  return {{"optimizer",
           {{"module", "keras.optimizers"}, {"class_name", cls}, {"config", config}, {"registered_name", nullptr}}},
          {"loss", loss},
          {"loss_weights", loss_weights},
          {"metrics", metrics},
          {"weighted_metrics", nullptr},
          {"run_eagerly", false},
          {"steps_per_execution", 1},
          {"jit_compile", false}};
}

}  // namespace

std::string Model::keras_config() const {
  json legacy = json::parse(to_json());
  // A functional model's calls in Keras 3's form: each input a keras tensor with its shape.
  std::map<std::string, Shape> shapes;
  for (size_t k = 0; k < input_names_.size(); ++k) shapes[input_names_[k]] = input_shapes_[k];
  for (const auto& l : layers_)
    if (l->built()) shapes[l->name()] = l->output_shape();
  auto tensor = [&](const json& ref) {
    return json{{"class_name", "__keras_tensor__"},
                {"config",
                 {{"shape", batch_shape(shapes.at(ref[0].get<std::string>()))},
                  {"dtype", "float32"},
                  {"keras_history", {ref[0], ref[1], ref[2]}}}}};
  };
  json layers = json::array();
  size_t index = 0;
  for (json& l : legacy["config"]["layers"]) {
    json c = l["config"];
    json entry;
    if (l["class_name"] == "InputLayer") {
      entry = {{"module", "keras.layers"},
               {"class_name", "InputLayer"},
               {"config",
                {{"batch_shape", c["batch_input_shape"]},
                 {"dtype", "float32"},
                 {"sparse", false},
                 {"name", graph_ ? c["name"] : json("input_layer")}}},
               {"registered_name", nullptr}};
    } else {
      // Keras 3 writes dtypes as DTypePolicy objects and tags every object with its module.
      const json& d = c["dtype"];
      c["dtype"] = dtype_policy(d.is_string() ? d.get<std::string>() : d["config"]["name"].get<std::string>());
      for (auto& [key, value] : c.items())
        if (key.ends_with("_initializer") && value.is_object()) {
          value["module"] = "keras.initializers";
          value["registered_name"] = nullptr;
        }
      entry = {
          {"module", "keras.layers"}, {"class_name", l["class_name"]}, {"config", c}, {"registered_name", nullptr}};
      const layers::Layer& layer = *layers_[index++];
      if (layer.built() && dynamic_cast<const layers::Merge*>(&layer) == nullptr)
        entry["build_config"] = {{"input_shape", batch_shape(layer.input_shape())}};
      if (graph_) {
        json calls = json::array();
        for (const json& node : l["inbound_nodes"]) {
          json args = json::array();
          for (const json& ref : node) args.push_back(tensor(ref));
          bool list = dynamic_cast<const layers::Merge*>(&layer) != nullptr;
          calls.push_back({{"args", json::array({list ? args : args[0]})}, {"kwargs", json::object()}});
        }
        entry["inbound_nodes"] = calls;
      }
    }
    if (graph_) {
      entry["name"] = l["name"];
      if (!entry.contains("inbound_nodes")) entry["inbound_nodes"] = json::array();
    }
    layers.push_back(std::move(entry));
  }
  json config = {{"name", name_}, {"trainable", true}, {"dtype", dtype_policy("float32")}, {"layers", layers}};
  json doc = {{"module", "keras"}, {"class_name", "Sequential"}, {"config", config}, {"registered_name", nullptr}};
  if (graph_) {
    config.erase("dtype");
    config["input_layers"] = legacy["config"]["input_layers"];
    config["output_layers"] = legacy["config"]["output_layers"];
    doc = {{"module", "keras.src.models.functional"},
           {"class_name", "Functional"},
           {"config", config},
           {"registered_name", "Functional"}};
  } else if (built()) {
    doc["build_config"] = {{"input_shape", batch_shape(layers_.front()->input_shape())}};
  }
  if (optimizer_) doc["compile_config"] = compile_config(*this, *optimizer_);
  return doc.dump();
}

void compile_from_keras_config(Model& model, const std::string& text, const std::string& source) {
  json cc = json::parse(text, nullptr, false);
  if (!cc.is_object()) fail("{}: compile_config must be an object, not {}", source, text);
  // The optimizer: a name, or {"class_name": "Adam", "config": {...}}.
  const json& o = cc.contains("optimizer") ? cc["optimizer"] : json("rmsprop");
  std::unique_ptr<Optimizer> optimizer;
  if (o.is_string()) {
    optimizer = optimizers::by_name(o.get<std::string>());
  } else if (o.is_object() && o.contains("class_name") && o["class_name"].is_string()) {
    std::string cls = lower(o["class_name"].get<std::string>());
    json c = o.contains("config") && o["config"].is_object() ? o["config"] : json::object();
    std::string where = fmt::format("{}: optimizer {}", source, o["class_name"].get<std::string>());
    auto number = [&](const char* key, double fallback) {
      if (!c.contains(key) || c[key].is_null()) return fallback;
      if (!c[key].is_number()) fail("{}: \"{}\" is {}, expected a number", where, key, c[key].dump());
      return c[key].get<double>();
    };
    auto refuse_unless = [&](const char* key, const json& only) {
      if (c.contains(key) && !c[key].is_null() && c[key] != only)
        fail("{}: \"{}\" is {}; Tandem implements only {}", where, key, c[key].dump(), only.dump());
    };
    for (const char* key : {"loss_scale_factor", "gradient_accumulation_steps"}) refuse_unless(key, nullptr);
    refuse_unless("use_ema", false);
    refuse_unless("amsgrad", false);
    refuse_unless("centered", false);
    if (c.contains("learning_rate") && c["learning_rate"].is_object())
      fail("{}: a learning-rate schedule in a .keras file is not read by Tandem", where);
    auto lr = [&](double fallback) { return static_cast<float>(number("learning_rate", fallback)); };
    auto f = [&](const char* key, double fallback) { return static_cast<float>(number(key, fallback)); };
    if (cls == "sgd")
      optimizer = std::make_unique<optimizers::SGD>(
          lr(0.01), optimizers::SGDOptions{f("momentum", 0.0), c.value("nesterov", false)});
    else if (cls == "adam")
      optimizer = std::make_unique<optimizers::Adam>(
          lr(0.001), optimizers::AdamOptions{f("beta_1", 0.9), f("beta_2", 0.999), f("epsilon", 1e-7)});
    else if (cls == "rmsprop")
      optimizer = std::make_unique<optimizers::RMSprop>(
          lr(0.001), optimizers::RMSpropOptions{f("rho", 0.9), f("momentum", 0.0), f("epsilon", 1e-7)});
    else if (cls == "adamw")
      optimizer = std::make_unique<optimizers::AdamW>(
          lr(0.001), f("weight_decay", 0.004),
          optimizers::AdamOptions{f("beta_1", 0.9), f("beta_2", 0.999), f("epsilon", 1e-7)});
    else if (cls == "adagrad")
      optimizer = std::make_unique<optimizers::Adagrad>(
          lr(0.001), optimizers::AdagradOptions{f("initial_accumulator_value", 0.1), f("epsilon", 1e-7)});
    else fail("{}: unknown optimizer; Tandem has SGD, Adam, AdamW, RMSprop and Adagrad", where);
    try {  // named as the file's, not the optimizer's own words
      optimizer->set_clipping({.clipnorm = f("clipnorm", 0.0),
                               .clipvalue = f("clipvalue", 0.0),
                               .global_clipnorm = f("global_clipnorm", 0.0)});
      if (cls != "adamw") optimizer->set_weight_decay(f("weight_decay", 0.0));
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  } else {
    fail("{}: \"optimizer\" is {}, expected a name or Keras' optimizer object", source, o.dump());
  }
  // The loss: a name, or {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": ...}};
  // a model of several outputs, a list of them (or a dict by output name), with loss_weights alike.
  if (!cc.contains("loss") || cc["loss"].is_null()) fail("{}: compile_config has no loss", source);
  auto loss_of = [&](const json& l) -> Loss {
    if (l.is_string()) return Loss(l.get<std::string>());
    if (!l.is_object() || !l.contains("class_name") || !l["class_name"].is_string())
      fail("{}: \"loss\" is {}, expected a name or Keras' loss object", source, l.dump());
    Loss named(snake(l["class_name"].get<std::string>()));
    json c = l.contains("config") && l["config"].is_object() ? l["config"] : json::object();
    std::string where = fmt::format("{}: loss {}", source, l["class_name"].get<std::string>());
    auto only = [&](const char* key, std::initializer_list<json> values) {  // what Tandem does, else refused
      if (!c.contains(key) || c[key].is_null()) return;
      for (const json& v : values)
        if (c[key] == v) return;
      fail("{}: \"{}\" is {}; Tandem implements only {}", where, key, c[key].dump(), json(values).dump());
    };
    only("reduction", {"sum_over_batch_size", "auto"});
    only("axis", {-1});
    only("ignore_class", {});
    try {
      return Loss(named.kind(), c.value("from_logits", false), c.value("label_smoothing", 0.0f));
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  };
  // A list, or a dict by output name, in the model's outputs' order.
  auto per_output = [&](const json& v, const char* what) {
    if (!v.is_array() && !v.is_object())
      fail("{}: \"{}\" is {}, expected a list or a dict by output name", source, what, v.dump());
    std::vector<json> out;
    if (v.is_array()) out.assign(v.begin(), v.end());
    for (const std::string& name : model.output_names())
      if (v.is_object()) {
        if (!v.contains(name)) fail("{}: \"{}\" has no entry for output \"{}\"", source, what, name);
        out.push_back(v[name]);
      }
    return out;
  };
  const json& l = cc["loss"];
  std::optional<Loss> loss;
  if (l.is_array() || (l.is_object() && !l.contains("class_name"))) {
    std::vector<Loss> losses;
    for (const json& each : per_output(l, "loss")) losses.push_back(loss_of(each));
    std::vector<float> weights;
    if (cc.contains("loss_weights") && !cc["loss_weights"].is_null())
      for (const json& w : per_output(cc["loss_weights"], "loss_weights")) {
        if (!w.is_number()) fail("{}: a loss weight is {}, expected a number", source, w.dump());
        weights.push_back(w.get<float>());
      }
    loss = Loss::outputs(std::move(losses), std::move(weights));
  } else {
    loss = loss_of(l);
    if (cc.contains("loss_weights") && !cc["loss_weights"].is_null())
      fail("{}: loss_weights {} beside one loss; Tandem weighs a list of losses, one per output", source,
           cc["loss_weights"].dump());
  }
  std::vector<std::string> metrics;
  if (cc.contains("metrics") && !cc["metrics"].is_null()) {
    if (!cc["metrics"].is_array())
      fail("{}: \"metrics\" is {}, expected a list of names", source, cc["metrics"].dump());
    for (const json& m : cc["metrics"]) {
      if (!m.is_string()) fail("{}: metric {} is not a name; Tandem reads metrics by name", source, m.dump());
      metrics.push_back(m.get<std::string>());
    }
  }
  model.compile(std::move(optimizer), *loss, std::move(metrics));
}

}  // namespace tandem
