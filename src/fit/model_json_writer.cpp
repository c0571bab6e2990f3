// Model::to_json: the model in Keras 2's model.to_json() layout (an InputLayer with
// batch_input_shape, then each layer's config with Keras' keys and defaults), which Keras 2 and 3
// and model_from_json read.
#include <cctype>
#include <nlohmann/json.hpp>

#include "tandem/graph.h"
#include "tandem/model_json.h"

namespace tandem {
namespace {

using nlohmann::json;
using namespace layers;

json pair_of(Size2 s) { return json::array({s.h, s.w}); }

// "glorot_uniform" -> {"class_name": "GlorotUniform", "config": {"seed": null}}.
json initializer(const InitializerSpec& spec) {
  std::string camel;
  bool upper = true;
  for (char c : spec.name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    camel += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  json config = json::object();
  for (const auto& [key, value] : spec.args) {
    json parsed = json::parse(value, nullptr, false);
    config[key] = parsed.is_discarded() ? json(value) : parsed;
  }
  if (spec.name != "zeros" && spec.name != "ones" && !config.contains("seed")) config["seed"] = nullptr;
  return {{"class_name", camel}, {"config", config}};
}

// Keras 2's form: null, {"class_name": "L2", "config": {"l2": 0.01}}, L1 or L1L2.
json regularizer_json(const Regularizer& r) {
  if (!r.any()) return nullptr;
  if (r.l1 == 0.0f) return {{"class_name", "L2"}, {"config", {{"l2", r.l2}}}};
  if (r.l2 == 0.0f) return {{"class_name", "L1"}, {"config", {{"l1", r.l1}}}};
  return {{"class_name", "L1L2"}, {"config", {{"l1", r.l1}, {"l2", r.l2}}}};
}

json activation_json(tandem::Activation a) { return std::string(activation_name(a)); }

json padding(Padding p) { return p == Padding::Same ? "same" : "valid"; }

json layer_config(const Layer& layer) {
  json c = {{"name", layer.name()}, {"trainable", layer.trainable()}, {"dtype", "float32"}};
  if (layer.dtype_policy() != "float32")  // Keras 2's Policy object
    c["dtype"] = {{"class_name", "Policy"}, {"config", {{"name", layer.dtype_policy()}}}};
  if (const auto* d = dynamic_cast<const Dense*>(&layer)) {
    c["units"] = d->units();
    c["activation"] = activation_json(d->activation());
    c["use_bias"] = d->options().use_bias;
    c["kernel_initializer"] = initializer(d->options().kernel_initializer);
    c["bias_initializer"] = initializer(d->options().bias_initializer);
    c["kernel_regularizer"] = regularizer_json(layer.regularizers().kernel);
    c["bias_regularizer"] = regularizer_json(layer.regularizers().bias);
    c["kernel_constraint"] = c["bias_constraint"] = nullptr;
  } else if (const auto* d = dynamic_cast<const Dropout*>(&layer)) {
    c["rate"] = d->rate();
    c["noise_shape"] = nullptr;
    c["seed"] = nullptr;
  } else if (const auto* v = dynamic_cast<const Conv2D*>(&layer)) {
    const Conv2DOptions& o = v->options();
    c["filters"] = v->filters();
    c["kernel_size"] = pair_of(v->kernel_size());
    c["strides"] = pair_of(o.strides);
    c["padding"] = o.padding;
    c["data_format"] = "channels_last";
    c["dilation_rate"] = json::array({1, 1});
    c["groups"] = 1;
    c["activation"] = o.activation.empty() ? "linear" : o.activation;
    c["use_bias"] = o.use_bias;
    c["kernel_initializer"] = initializer(o.kernel_initializer);
    c["bias_initializer"] = initializer(o.bias_initializer);
    c["kernel_regularizer"] = regularizer_json(layer.regularizers().kernel);
    c["bias_regularizer"] = regularizer_json(layer.regularizers().bias);
    c["kernel_constraint"] = c["bias_constraint"] = nullptr;
  } else if (const auto* p = dynamic_cast<const Pooling2D*>(&layer)) {
    c["pool_size"] = pair_of(p->pool_size());
    c["strides"] = pair_of(p->strides());
    c["padding"] = padding(p->padding());
    c["data_format"] = "channels_last";
  } else if (dynamic_cast<const Flatten*>(&layer) != nullptr) {
    c["data_format"] = "channels_last";
  } else if (const auto* b = dynamic_cast<const BatchNormalization*>(&layer)) {
    c["axis"] = -1;
    c["momentum"] = b->options().momentum;
    c["epsilon"] = b->options().epsilon;
    c["center"] = true;
    c["scale"] = true;
    for (const char* k : {"beta_initializer", "moving_mean_initializer"}) c[k] = initializer("zeros");
    for (const char* k : {"gamma_initializer", "moving_variance_initializer"}) c[k] = initializer("ones");
    if (b->options().synchronized) c["synchronized"] = true;
  } else if (dynamic_cast<const ReLU*>(&layer) != nullptr) {
    c["max_value"] = nullptr;
    c["negative_slope"] = 0.0;
    c["threshold"] = 0.0;
  } else if (const auto* a = dynamic_cast<const layers::Activation*>(&layer)) {
    c["activation"] = activation_json(a->activation());
  } else if (const auto* g = dynamic_cast<const GlobalAveragePooling2D*>(&layer)) {
    c["data_format"] = "channels_last";
    c["keepdims"] = g->keepdims();
  } else if (const auto* z = dynamic_cast<const ZeroPadding2D*>(&layer)) {
    const auto& p = z->padding();
    c["padding"] = json::array({json::array({p[0], p[1]}), json::array({p[2], p[3]})});
    c["data_format"] = "channels_last";
  } else if (const auto* m = dynamic_cast<const Concatenate*>(&layer)) {
    c["axis"] = m->axis();
  } else if (dynamic_cast<const Merge*>(&layer) != nullptr) {  // Add, Subtract, Multiply: nothing more
  } else {
    fail("to_json: {} has no Keras form", layer.label());
  }
  if (layer.regularizers().activity.any() || c.contains("kernel_regularizer"))
    c["activity_regularizer"] = regularizer_json(layer.regularizers().activity);
  return {{"class_name", layer.type()}, {"config", c}};
}

}  // namespace

// A functional model in Keras 2's layout: an InputLayer per input, then each layer with its name
// and its calls ("inbound_nodes": per call, its inputs as [layer, node, tensor, kwargs], a node
// being a layer's call counted from 0), and the model's inputs and outputs as references.
std::string Model::functional_json() const {
  const layers::Graph& g = *graph_;
  json entries = json::array(), inputs = json::array(), outputs = json::array();
  for (size_t k = 0; k < g.num_inputs(); ++k) {
    json batch_shape = json::array({nullptr});
    for (int64_t d : g.input_shapes[k]) batch_shape.push_back(d);
    entries.push_back({{"class_name", "InputLayer"},
                       {"config",
                        {{"batch_input_shape", batch_shape},
                         {"dtype", "float32"},
                         {"sparse", false},
                         {"ragged", false},
                         {"name", input_names_[k]}}},
                       {"name", input_names_[k]},
                       {"inbound_nodes", json::array()}});
    inputs.push_back({input_names_[k], 0, 0});
  }
  std::vector<size_t> call(g.nodes.size()), calls(layers_.size(), 0);  // each node's place among its layer's calls
  for (size_t i = 0; i < g.nodes.size(); ++i) call[i] = calls[g.nodes[i].layer]++;
  auto ref = [&](int from) -> json {
    if (from < 0) return {input_names_[static_cast<size_t>(-1 - from)], 0, 0};
    auto i = static_cast<size_t>(from);
    return {layers_[g.nodes[i].layer]->name(), call[i], 0};
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    json entry = layer_config(*layers_[l]), nodes = json::array();
    for (const layers::Graph::Node& node : g.nodes) {
      if (node.layer != l) continue;
      json refs = json::array();
      for (int from : node.inputs) {
        json r = ref(from);
        r.push_back(json::object());  // the call's keyword arguments: none
        refs.push_back(std::move(r));
      }
      nodes.push_back(refs);
    }
    entry["name"] = layers_[l]->name();
    entry["inbound_nodes"] = nodes;
    entries.push_back(std::move(entry));
  }
  for (int from : g.outputs) outputs.push_back(ref(from));
  json doc = {{"class_name", "Functional"},
              {"config", {{"name", name_}, {"layers", entries}, {"input_layers", inputs}, {"output_layers", outputs}}},
              {"backend", "tensorflow"}};
  return doc.dump();
}

std::string Model::to_json() const {
  if (graph_) return functional_json();
  json layers = json::array();
  if (!layers_.empty()) {
    const Layer& first = *layers_.front();
    std::optional<Shape> input =
        first.built() ? std::optional<Shape>(first.input_shape()) : first.declared_input_shape();
    if (input) {
      json batch_shape = json::array({nullptr});
      for (int64_t d : *input) batch_shape.push_back(d);
      layers.push_back({{"class_name", "InputLayer"},
                        {"config",
                         {{"batch_input_shape", batch_shape},
                          {"dtype", "float32"},
                          {"sparse", false},
                          {"ragged", false},
                          {"name", first.name() + "_input"}}}});
    }
  }
  for (const auto& layer : layers_) layers.push_back(layer_config(*layer));
  // No keras_version: the file is not Keras' own; its readers do not require one.
  json doc = {
      {"class_name", "Sequential"}, {"config", {{"name", name_}, {"layers", layers}}}, {"backend", "tensorflow"}};
  return doc.dump();
}

}  // namespace tandem
