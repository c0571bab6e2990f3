// The models the `tandem` subcommands train: presets from the reference tutorials or Keras model
// files (tandem/model_json.h), and the dataset shaped for a model's input.
#include "cli/common.h"

namespace tandem::cli {

using namespace layers;

bool is_preset(const std::string& name) {
  return name == "mlp" || name == "mlp5" || name == "cnn" || name == "cnn-fast" || name == "cifar-mlp" ||
         name == "resnet20";
}
std::string preset_names() { return "mlp, mlp5, cnn, cnn-fast, cifar-mlp, resnet20"; }

namespace {

// ResNet-20 for 32×32×3 images (He et al. 2016, the CIFAR network): a 3×3 convolution of 16
// filters, three stages of three basic blocks (16, 32, 64 filters; the second and third stages
// halve the image at their first block), global average pooling and 10 logits. A block is
// conv 3×3, batch normalization, ReLU, conv 3×3, batch normalization, the shortcut added, ReLU;
// where the shape changes the shortcut is a strided 1×1 convolution with batch normalization (He
// et al.'s option B). Convolutions have no bias (batch normalization's beta is it), He-normal
// kernels. 0.27 M parameters.
std::unique_ptr<Model> resnet20(uint64_t seed) {
  auto conv = [](int64_t filters, int64_t size, int64_t stride) {
    return std::make_shared<Conv2D>(
        filters, size,
        Conv2DOptions{.strides = stride, .padding = "same", .use_bias = false, .kernel_initializer = "he_normal"});
  };
  auto bn = [] { return std::make_shared<BatchNormalization>(); };
  SymbolicTensor x = Input({32, 32, 3}, "image");
  SymbolicTensor h = ReLU()((*bn())((*conv(16, 3, 1))(x)));
  for (int64_t filters : {16, 32, 64})
    for (int block = 0; block < 3; ++block) {
      int64_t stride = block == 0 && filters != 16 ? 2 : 1;
      SymbolicTensor y = ReLU()((*bn())((*conv(filters, 3, stride))(h)));
      y = (*bn())((*conv(filters, 3, 1))(y));
      SymbolicTensor shortcut = stride == 1 ? h : (*bn())((*conv(filters, 1, stride))(h));
      h = ReLU()(layers::Add()({y, shortcut}));
    }
  SymbolicTensor logits = Dense(10)(GlobalAveragePooling2D()(h));
  return std::make_unique<Functional>(x, logits, ModelOptions{.name = "resnet20", .seed = seed});
}

}  // namespace

ModelSpec make_model(const std::string& name, uint64_t seed, distribute::Strategy* strategy) {
  std::optional<distribute::Strategy::Scope> scope;
  if (strategy) scope.emplace(strategy);
  ModelSpec spec;
  spec.name = name;
  if (name == "resnet20") {
    spec.model = resnet20(seed);
    spec.default_optimizer = "sgd";
    spec.default_learning_rate = 0.1f;
    spec.default_momentum = 0.9f;
    spec.loss = Loss::sparse_categorical_crossentropy(true);
    return spec;
  }
  spec.model = std::make_unique<Sequential>(SequentialOptions{.name = name, .seed = seed});
  Model& m = *spec.model;
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
  } else if (name == "cnn-fast") {  // MNIST past 98.5% fastest (README): strided convolutions, no pooling
    m.add(Conv2D(32, 5, {.strides = 2, .activation = "relu", .input_shape = Shape{28, 28, 1}}));
    m.add(Conv2D(64, 3, {.strides = 2, .activation = "relu"}));
    m.add(Flatten());
    m.add(Dense(128, "relu"));
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
    // activation is spelled: Dense(10, "softmax") or Dense(10) then Activation("softmax"). A
    // functional model's last layer is its output's.
    const Layer* last = spec.model->layers().back().get();
    if (const layers::Graph* g = spec.model->graph(); g != nullptr && g->outputs[0] >= 0)
      last = spec.model->layers()[g->nodes[static_cast<size_t>(g->outputs[0])].layer].get();
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
    std::printf(
        "note: %s in %s declares input shape %s, and its input is %s: ignored, as Keras uses the first "
        "layer's alone\n",
        layer.label().c_str(), spec.name.c_str(), ignored.declared.str().c_str(),
        layer.built() ? layer.input_shape().str().c_str() : "not known yet");
  }
}

data::ImageDataset load_for_model(const std::string& dataset, const std::string& data_dir, Model& model) {
  const std::optional<Shape> declared = model.declared_input_shape();
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
  // 28×28 grey images (MNIST, Fashion-MNIST) for a model of 32×32 images (ResNet-20's): padded
  // with 2 rows and columns of zeros around, the grey channel repeated for each of the model's.
  if (per_sample == Shape{28, 28, 1} && declared->rank() == 3 && (*declared)[0] == 32 && (*declared)[1] == 32 &&
      ((*declared)[2] == 1 || (*declared)[2] == 3)) {
    std::printf("note: %s's 28x28 images padded to 32x32%s for model \"%s\"\n", dataset.c_str(),
                (*declared)[2] == 3 ? ", the grey channel repeated three times," : "", model.name().c_str());
    for (data::Split* s : {&d.train, &d.test}) {
      Tensor padded = ops::zero_pad2d(s->x, 2, 2, 2, 2);
      s->x = (*declared)[2] == 3 ? ops::concat(std::vector<Tensor>{padded, padded, padded}, -1) : padded;
    }
    per_sample = *declared;
  }
  if (!(per_sample == *declared))
    fail("dataset \"{}\" has samples of shape {}, model \"{}\" expects {}", dataset, per_sample.str(), model.name(),
         declared->str());
  return d;
}

}  // namespace tandem::cli
