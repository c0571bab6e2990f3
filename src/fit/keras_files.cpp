// Keras 3's own files for a Sequential: the weights in Keras' HDF5 layout (*.weights.h5, and
// model.weights.h5 inside a .keras zip) and the .keras file itself. Keras' saving_lib walks the
// model: the model's own "vars" (none for a Sequential, but written with its name), each layer
// under "layers/<its class in snake case>" made unique by a count ("dense", "dense_1"), its
// variables in Keras' order (trainable, then not: kernel, bias; gamma, beta, moving_mean,
// moving_variance), and the optimizer's under "optimizer": iteration, learning_rate, then its slots
// as Keras makes them (Adam: each variable's momentum and velocity in turn; RMSprop: every
// velocity, then every momentum).
#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "fit/keras_json.h"
#include "tandem/keras_io.h"
#include "tandem/model_json.h"

namespace tandem {
namespace {

using nlohmann::json;

constexpr const char* kKerasVersion = "3.16.0";  // the saving_lib the layout was checked against

// Keras' naming.to_snake_case for class names: "MaxPooling2D" -> "max_pooling2d".
std::string keras_snake(const std::string& cls) {
  std::string out;
  for (size_t i = 0; i < cls.size(); ++i) {
    char c = cls[i];
    bool upper = std::isupper(static_cast<unsigned char>(c)) != 0;
    bool next_lower = i + 1 < cls.size() && std::islower(static_cast<unsigned char>(cls[i + 1])) != 0;
    bool prev_lower = i > 0 && std::islower(static_cast<unsigned char>(cls[i - 1])) != 0;
    if (upper && i > 0 && (next_lower || prev_lower)) out += '_';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Each layer's group, as Keras' _save_container_state names them.
std::vector<std::string> layer_paths(const Model& model) {
  std::map<std::string, int> used;
  std::vector<std::string> out;
  for (const auto& layer : model.layers()) {
    std::string name = keras_snake(layer->type());
    auto [it, fresh] = used.try_emplace(name, 0);
    if (!fresh) name += "_" + std::to_string(++it->second);
    out.push_back("layers/" + name);
  }
  return out;
}

// The optimizer's slots in Keras' order, as indices into Tandem's (variable by variable).
std::vector<size_t> keras_slot_order(const Optimizer& optimizer, size_t variables) {
  auto per = static_cast<size_t>(optimizer.slots_per_variable());
  std::vector<size_t> order;
  if (optimizer.name() == "Adam") {  // add_optimizer_variables with two names interleaves them
    for (size_t i = 0; i < variables * per; ++i) order.push_back(i);
  } else {
    for (size_t k = 0; k < per; ++k)
      for (size_t i = 0; i < variables; ++i) order.push_back(i * per + k);
  }
  return order;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_as_hdf5(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  in.read(head, 8);
  return in.gcount() == 8 && io::is_hdf5(std::string_view(head, 8));
}

const io::ZipEntry& entry(const std::vector<io::ZipEntry>& entries, const std::string& name, const std::string& path) {
  for (const auto& e : entries)
    if (e.name == name) return e;
  std::string names;
  for (const auto& e : entries) names += (names.empty() ? "" : ", ") + e.name;
  fail("\"{}\" has no {} (a .keras file holds config.json, metadata.json and model.weights.h5; this one: {})", path,
       name, names.empty() ? "nothing" : names);
}

}  // namespace

std::string Model::keras_weights() {
  io::NamedTensors st = state();
  auto find = [&](const std::string& name) -> const Tensor& {
    for (const auto& [n, t] : st)
      if (n == name) return t;
    fail("save: model \"{}\" has no state \"{}\"", name_, name);
  };
  std::vector<io::KerasVars> groups{{"", name_, {}}};
  for (size_t k = 0; k < input_names_.size() && graph_; ++k)  // a functional model's layers include its inputs'
    groups.push_back({k == 0 ? "layers/input_layer" : fmt::format("layers/input_layer_{}", k), input_names_[k], {}});
  std::vector<std::string> paths = layer_paths(*this);
  for (size_t i = 0; i < layers_.size(); ++i) {
    io::KerasVars g{paths[i], layers_[i]->name(), {}};
    for (const Variable& v : layers_[i]->variables()) g.values.push_back(find(v.name));
    groups.push_back(std::move(g));
  }
  if (optimizer_) {
    std::vector<Variable*> trainable = trainable_variables();
    const std::string cls = optimizer_->name();  // the "name" attribute: Keras 3's default name ("SGD", "adam")
    io::KerasVars g{"optimizer", cls == "SGD" ? cls : lower(cls), {}};
    g.values.push_back(find("optimizer/iterations").reshape(Shape()));
    g.values.push_back(Tensor::full(Shape(), optimizer_->current_learning_rate()));
    std::vector<Tensor> slots;  // Tandem's order: each variable's slots in turn
    for (Variable* v : trainable) {
      std::string prefix = fmt::format("optimizer/{}/", v->name);
      for (const auto& [n, t] : st)
        if (n.starts_with(prefix) && n.find('/', prefix.size()) == std::string::npos) slots.push_back(t);
    }
    if (slots.size() != trainable.size() * static_cast<size_t>(optimizer_->slots_per_variable()))
      fail("save: optimizer {} of model \"{}\" has {} slots for {} variables", optimizer_->name(), name_, slots.size(),
           trainable.size());
    for (size_t i : keras_slot_order(*optimizer_, trainable.size())) g.values.push_back(slots[i]);
    groups.push_back(std::move(g));
  }
  return io::encode_keras_weights(groups);
}

void Model::load_keras_weights(std::string_view bytes, const std::string& source) {
  std::vector<io::KerasVars> groups = io::decode_keras_weights(bytes, source);
  std::map<std::string, const io::KerasVars*> by_path;
  for (const auto& g : groups) by_path[g.path] = &g;
  io::NamedTensors tensors;
  std::vector<std::string> paths = layer_paths(*this);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const layers::Layer& layer = *layers_[i];
    const auto& vars = layer.variables();
    auto it = by_path.find(paths[i]);
    size_t held = it == by_path.end() ? 0 : it->second->values.size();
    if (held != vars.size()) {
      std::string expected;
      for (const Variable& v : vars) expected += (expected.empty() ? "" : ", ") + v.name;
      fail("load_weights: \"{}\" holds {} weights for layer '{}' ({}/vars), the model's {} expects {}{}{}", source,
           held, layer.name(), paths[i], layer.type(), vars.size(), vars.empty() ? "" : ": ", expected);
    }
    for (size_t k = 0; k < vars.size(); ++k) {
      const Tensor& t = it->second->values[k];
      std::string short_name = vars[k].name.substr(vars[k].name.find_last_of('/') + 1);
      if (!(t.shape() == vars[k].value.shape()) || t.dtype() != DType::Float32)
        fail("load_weights: \"{}\": layer '{}' ({}/vars/{}) has {} {} {}, the model expects float32 {}", source,
             layer.name(), paths[i], k, short_name, dtype_name(t.dtype()), t.shape().str(),
             vars[k].value.shape().str());
      tensors.emplace_back(vars[k].name, t);
    }
  }
  // The optimizer's state when the model is compiled and the file has it (else, as Keras, none).
  auto opt = by_path.find("optimizer");
  if (optimizer_ && opt != by_path.end() && !opt->second->values.empty()) {
    const auto& values = opt->second->values;
    std::vector<Variable*> trainable = trainable_variables();
    optimizer_->build(trainable);
    io::NamedTensors current = optimizer_->state();  // iterations, then the slots in Tandem's order
    size_t slots = current.size() - 1;
    // Keras has a learning_rate variable unless the rate is a schedule.
    size_t first = values.size() == slots + 2 ? 2 : 1;
    if (values.size() != slots + first)
      fail("load_weights: \"{}\" holds {} optimizer variables; {} expects {} (iteration, learning_rate and {} slots)",
           source, values.size(), optimizer_->name(), slots + 2, slots);
    if (values[0].numel() != 1 || values[0].dtype() != DType::Int32)
      fail("load_weights: \"{}\": optimizer/vars/0 (the iteration count) is {} {}, expected one integer", source,
           dtype_name(values[0].dtype()), values[0].shape().str());
    tensors.emplace_back("optimizer/iterations", values[0].reshape(Shape{1}));
    std::vector<size_t> order = keras_slot_order(*optimizer_, trainable.size());
    for (size_t j = 0; j < order.size(); ++j) {
      const auto& [name, slot] = current[1 + order[j]];
      const Tensor& t = values[first + j];
      if (!(t.shape() == slot.shape()) || t.dtype() != DType::Float32)
        fail("load_weights: \"{}\": optimizer/vars/{} is {} {}, {} expects float32 {} ({})", source, first + j,
             dtype_name(t.dtype()), t.shape().str(), optimizer_->name(), slot.shape().str(), name);
      tensors.emplace_back(name, t);
    }
  }
  restore_state(tensors, source);
}

void Model::load_weights(const std::string& path) {
  if (path.ends_with(".keras")) {
    if (!built()) fail("load_weights: model \"{}\" is not built yet (call build() with the input shape first)", name_);
    auto entries = io::decode_zip(io::read_file(path), path);
    load_keras_weights(entry(entries, "model.weights.h5", path).data, path + "/model.weights.h5");
  } else if (starts_as_hdf5(path)) {
    if (!built()) fail("load_weights: model \"{}\" is not built yet (call build() with the input shape first)", name_);
    load_keras_weights(io::read_file(path), path);
  } else {
    checked_load(path, nullptr);
  }
}

void Model::save(const std::string& path) {
  if (!path.ends_with(".keras")) fail("save: \"{}\" must end in .keras (Keras 3's model file)", path);
  if (!built()) fail("save: model \"{}\" is not built yet (call build() or fit() first)", name_);
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", &tm);
  json metadata = {{"keras_version", kKerasVersion}, {"date_saved", date}};
  std::vector<io::ZipEntry> entries{
      {"metadata.json", metadata.dump()}, {"config.json", keras_config()}, {"model.weights.h5", keras_weights()}};
  io::write_file_atomically(path, io::encode_zip(entries));
}

std::unique_ptr<Model> load_model(const std::string& path, ModelJsonOptions options, bool compile) {
  auto entries = io::decode_zip(io::read_file(path), path);
  const std::string& text = entry(entries, "config.json", path).data;
  std::string source = fmt::format("config.json in \"{}\"", path);
  json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) fail("{} is not a JSON object", source);
  std::string cls = model_json::text_at(doc, "class_name");
  if (cls != "Sequential" && cls != "Functional")
    fail("{}: the model is a {}; Tandem reads Sequential and Functional models", source,
         cls.empty() ? "(no class_name)" : cls);
  options.source = source;
  std::unique_ptr<Model> model = model_from_json(text, options);
  // A Sequential's input shape: build_config's, else the first layer's (an InputLayer's). A
  // functional model is built as it is made from its inputs.
  if (!model->graph()) {
    std::optional<Shape> input = model->layers().front()->declared_input_shape();
    if (doc.contains("build_config") && doc["build_config"].is_object() &&
        doc["build_config"].contains("input_shape")) {
      const json& s = doc["build_config"]["input_shape"];
      if (!s.is_array() || s.empty()) fail("{}: build_config's input_shape is {}", source, s.dump());
      Shape shape;
      for (size_t i = 1; i < s.size(); ++i) {
        if (!s[i].is_number_integer() || s[i].get<int64_t>() <= 0)
          fail("{}: build_config's input_shape is {}, expected positive sizes after the batch", source, s.dump());
        shape.push_back(s[i].get<int64_t>());
      }
      input = shape;
    }
    if (!input) fail("{}: no input shape (no build_config and no InputLayer), so the weights cannot be placed", source);
    model->build(*input);
  }
  if (compile && doc.contains("compile_config") && doc["compile_config"].is_object())
    compile_from_keras_config(*model, doc["compile_config"].dump(), source + ", compile_config");
  model->load_weights(path);
  return model;
}

}  // namespace tandem
