#pragma once
// Keras model files (what Keras' model.to_json() writes) read into a Sequential or a Functional,
// and a model written as one (Model::to_json). Layers Dense, Dropout, Flatten, Conv2D,
// MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, ZeroPadding2D, BatchNormalization,
// Activation, ReLU, Add, Subtract, Multiply, Concatenate and InputLayer; a functional model's
// calls in Keras 2's layout or Keras 3's. An attribute Tandem does not implement must hold Keras'
// default, else the file is refused naming it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/model.h"

namespace tandem {

// A layer after the first that declared an input shape (Keras 2 writes batch_input_shape on some):
// ignored, as Keras' Sequential does.
struct IgnoredInputShape {
  size_t layer;  // its index in the model's layers
  Shape declared;
};

struct ModelJsonOptions {
  uint64_t seed = 0;                  // the model's (weights, dropout, shuffling)
  std::string source = "model JSON";  // how errors name the text (load_model_json: the file)
  std::vector<IgnoredInputShape>* ignored_input_shapes = nullptr;  // filled when given
};

std::unique_ptr<Model> model_from_json(const std::string& text, const ModelJsonOptions& options = {});
std::unique_ptr<Model> load_model_json(const std::string& path, ModelJsonOptions options = {});

// A Keras 3 .keras file (Model::save's, or Keras' own for the layers above, Sequential or Functional): the model from
// config.json, built from its build_config, compiled from its compile_config (optimizers SGD,
// Adam, RMSprop and Adagrad; a loss by name or as Keras' loss object; metrics by name), and its
// weights (and optimizer state) from model.weights.h5. A file it cannot read is a tandem::Error
// naming the file and what was found. options.seed as for model_from_json; compile false leaves
// the model uncompiled (and the optimizer's state unread), as Keras' compile=False.
std::unique_ptr<Model> load_model(const std::string& path, ModelJsonOptions options = {}, bool compile = true);
// Compiles `model` as Keras' compile_config says (`source` names it in errors).
void compile_from_keras_config(Model& model, const std::string& compile_config_json, const std::string& source);

}  // namespace tandem
