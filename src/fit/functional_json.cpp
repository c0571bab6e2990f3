// Keras' configs of functional models read into a Functional (fit/keras_json.h). Each layer entry
// names its calls ("inbound_nodes"): Keras 2 writes a call as a list of [layer, node, tensor,
// kwargs] references, Keras 3 as {"args": [a tensor, or a list of them], "kwargs": {}} with each
// tensor {"class_name": "__keras_tensor__", "config": {"keras_history": [layer, node, tensor]}}.
// A reference names a call of a layer (its node: the layer's calls in the file's order, counted
// from 0) and that call's output. The calls are made once every input they name exists, in the
// file's order, so that a shared layer's later call may use a layer listed after it.
#include <map>
#include <set>

#include "fit/keras_json.h"
#include "tandem/graph.h"

namespace tandem::model_json {

namespace {

using layers::SymbolicTensor;
using nlohmann::json;

struct Ref {
  std::string layer;
  size_t node = 0;
};

// A call's keyword arguments: none, or only unset ones (Keras writes {"mask": null}).
void check_kwargs(const json& kwargs, const std::string& where) {
  if (!kwargs.is_object()) fail("{}: a call's keyword arguments are {}, expected an object", where, kwargs.dump());
  for (const auto& [key, value] : kwargs.items())
    if (!value.is_null())
      fail("{}: a call passes {}={}; Tandem calls a layer on its inputs alone (training follows fit and predict)",
           where, key, value.dump());
}

// A list as Keras writes one: an array, or Keras 3's {"class_name": "__tuple__", "config": {"value": [...]}}.
const json* list_of(const json& v) {
  if (v.is_array()) return &v;
  if (v.is_object() && text_at(v, "class_name") == "__tuple__" && v.contains("config") && v["config"].is_object() &&
      v["config"].contains("value") && v["config"]["value"].is_array())
    return &v["config"]["value"];
  return nullptr;
}

// [layer, node, tensor(, kwargs)] or Keras 3's keras tensor; every layer has one output (tensor 0).
Ref ref_of(const json& r, const std::string& where) {
  const json* history = &r;
  if (r.is_object()) {
    if (text_at(r, "class_name") != "__keras_tensor__" || !r.contains("config") || !r["config"].is_object() ||
        !r["config"].contains("keras_history"))
      fail(
          "{}: {} is not a tensor (expected {{\"class_name\": \"__keras_tensor__\", \"config\": {{\"keras_history\": "
          "[layer, node, tensor]}}}})",
          where, r.dump());
    history = &r["config"]["keras_history"];
  }
  const json& h = *history;
  if (!h.is_array() || h.size() < 3 || h.size() > 4 || !h[0].is_string() || !h[1].is_number_unsigned() ||
      !h[2].is_number_integer())
    fail("{}: the reference {} is not [layer name, node index, tensor index]", where, h.dump());
  if (h[2].get<int64_t>() != 0)
    fail("{}: the reference {} names output {} of \"{}\"; Tandem's layers have one output (0)", where, h.dump(),
         h[2].get<int64_t>(), h[0].get<std::string>());
  if (h.size() == 4) check_kwargs(h[3], where);
  return {h[0].get<std::string>(), h[1].get<size_t>()};
}

// One call's inputs: Keras 2's list of references (or one reference alone), Keras 3's
// {"args": [a tensor, or a list of them], "kwargs": {}}.
std::vector<Ref> call_of(const json& node, const std::string& where) {
  std::vector<Ref> inputs;
  if (node.is_array()) {
    if (node.empty()) fail("{}: a call with no inputs", where);
    if (node[0].is_string()) return {ref_of(node, where)};
    for (const json& r : node) inputs.push_back(ref_of(r, where));
    return inputs;
  }
  if (!node.is_object() || !node.contains("args"))
    fail("{}: the call {} is neither Keras 2's list of references nor Keras 3's {{\"args\": [...], \"kwargs\": {{}}}}",
         where, node.dump());
  for (const auto& [key, value] : node.items())
    if (key != "args" && key != "kwargs") fail("{}: the call has an unknown key \"{}\" ({})", where, key, value.dump());
  if (node.contains("kwargs")) check_kwargs(node["kwargs"], where);
  const json* args = list_of(node["args"]);
  if (args == nullptr || args->size() != 1)
    fail("{}: the call's arguments are {}, expected its input alone", where, node["args"].dump());
  if (const json* list = list_of((*args)[0])) {
    if (list->empty()) fail("{}: a call with an empty list of inputs", where);
    for (const json& r : *list) inputs.push_back(ref_of(r, where));
  } else {
    inputs.push_back(ref_of((*args)[0], where));
  }
  return inputs;
}

// input_layers / output_layers: a list of references, one reference alone, or a dict of them
// (Keras 3's, by key).
std::vector<Ref> refs_of(const json& root, const char* key, const std::string& file) {
  if (!root.contains(key)) fail("{}: a functional model needs \"{}\"", file, key);
  const json& v = root[key];
  std::string where = fmt::format("{}, \"{}\"", file, key);
  std::vector<Ref> out;
  if (v.is_array() && !v.empty() && v[0].is_string()) {
    out.push_back(ref_of(v, where));
  } else if (v.is_array() || v.is_object()) {  // an object: Keras 3's dict of inputs, by key
    for (const json& r : v) out.push_back(ref_of(r, where));
  }
  if (out.empty()) fail("{}: {} holds no reference", where, v.dump());
  return out;
}

// A model's dtype: null, "float32", or Keras 3's DTypePolicy of it.
bool float32_policy(const json& v) {
  if (v.is_null()) return true;
  if (v.is_string()) return v.get<std::string>() == "float32";
  return v.is_object() && v.contains("config") && text_at(v["config"], "name") == "float32";
}

}  // namespace

std::unique_ptr<Model> functional_from_json(const json& root, const ModelJsonOptions& options) {
  const std::string& file = options.source;
  for (const auto& [key, value] : root.items())
    if (key != "name" && key != "layers" && key != "input_layers" && key != "output_layers" && key != "trainable" &&
        !(key == "dtype" && float32_policy(value)))
      fail("{}: the functional model's config has an unknown key \"{}\" ({}); Tandem would ignore it", file, key,
           value.dump());
  struct Entry {
    std::string where;
    std::shared_ptr<layers::Layer> layer;  // null: an InputLayer
    std::vector<std::vector<Ref>> calls;
    std::vector<SymbolicTensor> outputs;  // per call made
  };
  std::vector<Entry> entries;
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < root["layers"].size(); ++i) {
    const json& l = root["layers"][i];
    std::string where = fmt::format("{}, layer {}", file, i);
    if (!l.is_object()) fail("{}: is {}, expected an object", where, l.dump());
    const json& config = l.contains("config") && l["config"].is_object() ? l["config"] : json::object();
    std::string name = l.contains("name") && l["name"].is_string()             ? l["name"].get<std::string>()
                       : config.contains("name") && config["name"].is_string() ? config["name"].get<std::string>()
                                                                               : "";
    if (name.empty()) fail("{}: a functional model's layer needs a \"name\"", where);
    if (config.contains("name") && config["name"] != name)
      fail("{}: named \"{}\", its config {}", where, name, config["name"].dump());
    where = fmt::format("{} (\"{}\")", where, name);
    if (!by_name.emplace(name, i).second) fail("{}: a second layer named \"{}\"", where, name);
    if (!l.contains("inbound_nodes") || !l["inbound_nodes"].is_array())
      fail("{}: a functional model's layer needs \"inbound_nodes\" (a list of its calls)", where);
    for (const auto& [key, value] : l.items())
      if (key != "class_name" && key != "config" && key != "name" && key != "inbound_nodes" && key != "module" &&
          key != "registered_name" && key != "build_config")
        fail("{}: unknown key \"{}\" ({}); Tandem would ignore it", where, key, value.dump());
    Entry e{where, layer_from_keras(l, fmt::format("{}, layer {}", file, i), std::nullopt), {}, {}};
    if (!e.layer) {
      std::optional<Shape> shape = shape_of(config, where);
      if (!shape) fail("{}: an InputLayer needs its shape (\"batch_input_shape\" or \"batch_shape\")", where);
      if (!l["inbound_nodes"].empty()) fail("{}: an InputLayer is called by nothing, yet has calls", where);
      e.outputs.push_back(layers::Input(*shape, name));
    }
    for (const json& node : l["inbound_nodes"]) e.calls.push_back(call_of(node, where));
    if (e.layer && e.calls.empty())
      fail("{}: the layer is never called (no \"inbound_nodes\"), so it is not in the model", where);
    entries.push_back(std::move(e));
  }
  // What a reference names, if made yet; an Error where it can never be.
  auto find = [&](const Ref& r, const std::string& where) -> const SymbolicTensor* {
    auto it = by_name.find(r.layer);
    if (it == by_name.end()) fail("{}: the reference to \"{}\" names no layer of the model", where, r.layer);
    const Entry& e = entries[it->second];
    size_t calls = e.layer ? e.calls.size() : 1;
    if (r.node >= calls)
      fail("{}: the reference to \"{}\" names its call {}, and it has {} call(s)", where, r.layer, r.node, calls);
    return r.node < e.outputs.size() ? &e.outputs[r.node] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (Entry& e : entries) {
      while (e.layer && e.outputs.size() < e.calls.size()) {
        const std::vector<Ref>& call = e.calls[e.outputs.size()];
        std::vector<SymbolicTensor> inputs;
        for (const Ref& r : call)
          if (const SymbolicTensor* t = find(r, e.where)) inputs.push_back(*t);
        if (inputs.size() < call.size()) break;
        bool merge = dynamic_cast<const layers::Merge*>(e.layer.get()) != nullptr;
        if (merge || inputs.size() > 1) e.outputs.push_back((*e.layer)(std::span<const SymbolicTensor>(inputs)));
        else e.outputs.push_back((*e.layer)(inputs[0]));
        progress = true;
      }
    }
  }
  for (const Entry& e : entries)
    if (e.layer && e.outputs.size() < e.calls.size())
      fail("{}: its call {} waits on outputs that wait on it (the layers' calls form a cycle)", e.where,
           e.outputs.size());
  std::vector<SymbolicTensor> inputs, outputs;
  for (const Ref& r : refs_of(root, "input_layers", file)) {
    const SymbolicTensor* t = find(r, fmt::format("{}, \"input_layers\"", file));
    if (entries[by_name[r.layer]].layer) fail("{}: input \"{}\" is not an InputLayer", file, r.layer);
    inputs.push_back(*t);
  }
  for (const Ref& r : refs_of(root, "output_layers", file))
    outputs.push_back(*find(r, fmt::format("{}, \"output_layers\"", file)));
  auto model = std::make_unique<Functional>(
      inputs, outputs,
      ModelOptions{root.contains("name") && root["name"].is_string() ? root["name"].get<std::string>() : "",
                   options.seed});
  std::set<const layers::Layer*> in_model;
  for (const auto& l : model->layers()) in_model.insert(l.get());
  for (const Entry& e : entries)
    if (e.layer && !in_model.count(e.layer.get()))
      fail("{}: the layer is not on a path from the model's inputs to its outputs", e.where);
  if (root.contains("trainable")) {
    if (!root["trainable"].is_boolean())
      fail("{}: the model's \"trainable\" is {}, expected true or false", file, root["trainable"].dump());
    if (!root["trainable"].get<bool>()) model->set_trainable(false);
  }
  return model;
}

}  // namespace tandem::model_json
