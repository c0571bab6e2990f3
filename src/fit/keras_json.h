#pragma once
// The parts of reading Keras model configs (tandem/model_json.h) that Sequential and functional
// models share: a layer from its config entry, and the declared input shape of one.
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tandem/model_json.h"

namespace tandem::model_json {

// o[key] where o is an object and it is a string; else "".
inline std::string text_at(const nlohmann::json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
}

// "input_shape" (per sample), "batch_input_shape" (Keras 2) or "batch_shape" (Keras 3) of a
// layer's config, without the batch axis; none where it declares none.
std::optional<Shape> shape_of(const nlohmann::json& config, const std::string& file);

// The layer a config entry ({"class_name": ..., "config": {...}}) describes, declaring `input` as
// its input shape; every key of its config honoured or holding Keras' default, else an Error
// (`where` names the entry). Null for an InputLayer (its keys checked alike).
std::shared_ptr<layers::Layer> layer_from_keras(const nlohmann::json& entry, const std::string& where,
                                                const std::optional<Shape>& input);

// A functional model's config ({"name", "layers" with "inbound_nodes", "input_layers",
// "output_layers"}), in Keras 2's layout or Keras 3's.
std::unique_ptr<Model> functional_from_json(const nlohmann::json& config, const ModelJsonOptions& options);

}  // namespace tandem::model_json
