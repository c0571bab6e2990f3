// Keras' configs of functional models (src/fit/functional_json.cpp, Model::to_json and save): files
// made by hand in the layouts Keras 2 (tf.keras' model.to_json()) and Keras 3 (a .keras file's
// config.json) write: a shared layer over two inputs, and a residual block of every layer kind
// ResNets use; Tandem's own functional models written and read back to the same model and
// weights, as JSON and as .keras files; broken graphs named.
#include <gtest/gtest.h>

#include "tandem/io.h"
#include "tandem/keras_io.h"
#include "tandem/tandem.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;
using testing::expect_error;

// Keras 2.13's model.to_json() for
//   a = Input((4,)); b = Input((4,)); shared = Dense(3, activation="relu")
//   out = Dense(2)(Add()([shared(a), shared(b)])); Model([a, b], out)
const char* kKeras2SharedLayer = R"({"class_name": "Functional", "config": {"name": "model", "trainable": true,
  "layers": [
  {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 4], "dtype": "float32", "sparse": false,
   "ragged": false, "name": "input_1"}, "name": "input_1", "inbound_nodes": []},
  {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 4], "dtype": "float32", "sparse": false,
   "ragged": false, "name": "input_2"}, "name": "input_2", "inbound_nodes": []},
  {"class_name": "Dense", "config": {"name": "shared", "trainable": true, "dtype": "float32", "units": 3,
   "activation": "relu", "use_bias": true, "kernel_initializer": {"class_name": "GlorotUniform", "config":
   {"seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null,
   "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null},
   "name": "shared", "inbound_nodes": [[["input_1", 0, 0, {}]], [["input_2", 0, 0, {}]]]},
  {"class_name": "Add", "config": {"name": "add", "trainable": true, "dtype": "float32"}, "name": "add",
   "inbound_nodes": [[["shared", 0, 0, {}], ["shared", 1, 0, {}]]]},
  {"class_name": "Dense", "config": {"name": "out", "trainable": true, "dtype": "float32", "units": 2,
   "activation": "linear", "use_bias": true, "kernel_initializer": {"class_name": "GlorotUniform", "config":
   {"seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null,
   "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null},
   "name": "out", "inbound_nodes": [[["add", 0, 0, {}]]]}],
  "input_layers": [["input_1", 0, 0], ["input_2", 0, 0]], "output_layers": [["out", 0, 0]]},
  "keras_version": "2.13.1", "backend": "tensorflow"})";

TEST(FunctionalJson, AKeras2FileOfASharedLayerOverTwoInputsIsThatModel) {
  auto model = model_from_json(kKeras2SharedLayer, {.seed = 4});
  ASSERT_NE(model->graph(), nullptr);
  EXPECT_EQ(model->input_names(), (std::vector<std::string>{"input_1", "input_2"}));
  ASSERT_EQ(model->layers().size(), 3u);  // the shared Dense once
  EXPECT_EQ(model->layers()[0]->name(), "shared");
  std::vector<Variable*> v = model->variables();
  Tensor a = testing::random_tensor({5, 4}, 1), b = testing::random_tensor({5, 4}, 2);
  auto shared = [&](const Tensor& x) { return ops::dense(x, v[0]->value, v[1]->value, tandem::Activation::ReLU); };
  Tensor by_hand = ops::dense(ops::add(shared(a), shared(b)), v[2]->value, v[3]->value, tandem::Activation::Linear);
  EXPECT_EQ((*model)(pack_inputs(std::vector{a, b})).to_vector(), by_hand.to_vector());
  // Written back in the same layout, it reads as the same model.
  auto again = model_from_json(model->to_json(), {.seed = 4});
  EXPECT_EQ(again->to_json(), model->to_json());
  EXPECT_EQ(again->summary(), model->summary());
}

// Keras 3's config.json for a residual block with every layer kind ResNets use:
//   x = Input((6, 6, 2)); c = ReLU()(BatchNormalization()(Conv2D(4, 3, padding="same", use_bias=False)(x)))
//   r = Add()([c, Conv2D(4, 1)(x)]); z = ZeroPadding2D(1)(r); g = GlobalAveragePooling2D()(z)
//   out = Dense(3, activation="softmax")(Concatenate()([g, GlobalAveragePooling2D()(x)]))
std::string keras3_residual_config() {
  auto policy = std::string(
      R"({"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null})");
  auto tensor = [](const std::string& shape, const std::string& layer) {
    return R"({"class_name": "__keras_tensor__", "config": {"shape": )" + shape +
           R"(, "dtype": "float32", "keras_history": [")" + layer + R"(", 0, 0]}})";
  };
  auto call = [&](const std::string& shape, const std::string& layer) {
    return R"([{"args": [)" + tensor(shape, layer) + R"(], "kwargs": {}}])";
  };
  auto init = [](const std::string& cls) {
    return R"({"module": "keras.initializers", "class_name": ")" + cls + R"(", "config": {}, "registered_name": null})";
  };
  auto layer = [&](const std::string& cls, const std::string& name, const std::string& config,
                   const std::string& inbound) {
    return R"({"module": "keras.layers", "class_name": ")" + cls + R"(", "config": {"name": ")" + name +
           R"(", "trainable": true, "dtype": )" + policy + config + R"(}, "registered_name": null, "name": ")" + name +
           R"(", "inbound_nodes": )" + inbound + "}";
  };
  std::string conv_common = R"(, "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1,
    "activation": "linear", "kernel_initializer": )" +
                            init("GlorotUniform") + R"(, "bias_initializer": )" + init("Zeros") +
                            R"(, "kernel_regularizer": null, "bias_regularizer": null,
    "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null)";
  std::vector<std::string> layers{
      R"({"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [null, 6, 6, 2],
        "dtype": "float32", "sparse": false, "ragged": false, "name": "input_layer", "optional": false},
        "registered_name": null, "name": "input_layer", "inbound_nodes": []})",
      layer("Conv2D", "conv2d",
            R"(, "filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "use_bias": false)" +
                conv_common,
            call("[null, 6, 6, 2]", "input_layer")),
      layer("BatchNormalization", "batch_normalization",
            R"(, "axis": -1, "momentum": 0.99, "epsilon": 0.001, "center": true, "scale": true, "beta_initializer": )" +
                init("Zeros") + R"(, "gamma_initializer": )" + init("Ones") + R"(, "moving_mean_initializer": )" +
                init("Zeros") + R"(, "moving_variance_initializer": )" + init("Ones") +
                R"(, "beta_regularizer": null, "gamma_regularizer": null, "beta_constraint": null,
                "gamma_constraint": null, "synchronized": false)",
            R"([{"args": [)" + tensor("[null, 6, 6, 4]", "conv2d") + R"(], "kwargs": {"mask": null}}])"),
      layer("ReLU", "re_lu", R"(, "max_value": null, "negative_slope": 0.0, "threshold": 0.0)",
            call("[null, 6, 6, 4]", "batch_normalization")),
      layer("Conv2D", "conv2d_1",
            R"(, "filters": 4, "kernel_size": [1, 1], "strides": [1, 1], "padding": "valid", "use_bias": true)" +
                conv_common,
            call("[null, 6, 6, 2]", "input_layer")),
      layer("Add", "add", "",
            R"([{"args": [[)" + tensor("[null, 6, 6, 4]", "re_lu") + ", " + tensor("[null, 6, 6, 4]", "conv2d_1") +
                R"(]], "kwargs": {}}])"),
      layer("ZeroPadding2D", "zero_padding2d", R"(, "padding": [[1, 1], [1, 1]], "data_format": "channels_last")",
            call("[null, 6, 6, 4]", "add")),
      layer("GlobalAveragePooling2D", "global_average_pooling2d",
            R"(, "data_format": "channels_last", "keepdims": false)", call("[null, 8, 8, 4]", "zero_padding2d")),
      layer("GlobalAveragePooling2D", "global_average_pooling2d_1",
            R"(, "data_format": "channels_last", "keepdims": false)", call("[null, 6, 6, 2]", "input_layer")),
      layer("Concatenate", "concatenate", R"(, "axis": -1)",
            R"([{"args": [[)" + tensor("[null, 4]", "global_average_pooling2d") + ", " +
                tensor("[null, 2]", "global_average_pooling2d_1") + R"(]], "kwargs": {}}])"),
      layer("Dense", "dense",
            R"(, "units": 3, "activation": "softmax", "use_bias": true, "kernel_initializer": )" +
                init("GlorotUniform") + R"(, "bias_initializer": )" + init("Zeros") +
                R"(, "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null,
                "bias_constraint": null, "quantization_config": null)",
            call("[null, 6]", "concatenate")),
  };
  std::string joined;
  for (const std::string& l : layers) joined += (joined.empty() ? "" : ", ") + l;
  return R"({"module": "keras.src.models.functional", "class_name": "Functional", "config": {"name": "functional",
    "trainable": true, "layers": [)" +
         joined + R"(], "input_layers": [["input_layer", 0, 0]], "output_layers": [["dense", 0, 0]]},
    "registered_name": "Functional", "compile_config": {"optimizer": "adam", "loss": "sparse_categorical_crossentropy",
    "loss_weights": null, "metrics": null, "weighted_metrics": null, "run_eagerly": false, "steps_per_execution": 1,
    "jit_compile": false}})";
}

TEST(FunctionalJson, AKeras3FileOfAResidualBlockLoadsWithItsWeightsAndWritesBack) {
  testing::TempDir dir;
  std::string config = keras3_residual_config();
  auto read = model_from_json(config, {.seed = 2});
  std::vector<std::string> names;
  for (const auto& l : read->layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"conv2d", "batch_normalization", "re_lu", "conv2d_1", "add",
                                             "zero_padding2d", "global_average_pooling2d", "global_average_pooling2d_1",
                                             "concatenate", "dense"}));
  EXPECT_EQ(read->output_shape(), (Shape{3}));
  // Keras' weights, in its groups (the InputLayer's empty), into a .keras file beside the config.
  std::vector<io::KerasVars> groups{{"", "functional", {}}, {"layers/input_layer", "input_layer", {}}};
  std::map<std::string, int> used;
  std::vector<Tensor> values;
  uint64_t seed = 10;
  for (const auto& l : read->layers()) {
    std::string group = l->type() == "Conv2D" ? "conv2d" : l->name();
    if (l->type() == "Conv2D" && used[group]++ > 0) group += "_1";
    io::KerasVars g{"layers/" + group, l->name(), {}};
    for (const Variable& v : l->variables())
      g.values.push_back(testing::random_tensor(v.value.shape(), seed++, 0.1f, 1.0f));  // variances positive
    for (const Tensor& t : g.values) values.push_back(t);
    groups.push_back(std::move(g));
  }
  io::write_file_atomically(dir.file("k.keras"),
                            io::encode_zip({{"metadata.json", R"({"keras_version": "3.16.0", "date_saved": "x"})"},
                                            {"config.json", config},
                                            {"model.weights.h5", io::encode_keras_weights(groups)}}));
  auto model = load_model(dir.file("k.keras"));
  EXPECT_EQ(model->optimizer().name(), "Adam");
  std::vector<Variable*> v = model->variables();
  ASSERT_EQ(v.size(), values.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i]->value.to_vector(), values[i].to_vector()) << v[i]->name;
  // Written by Tandem (.keras and to_json) and read back: the same model, weights and predictions.
  model->save(dir.file("again.keras"));
  auto again = load_model(dir.file("again.keras"));
  EXPECT_EQ(again->to_json(), model->to_json());
  EXPECT_EQ(again->summary(), model->summary());
  Tensor x = testing::random_tensor({4, 6, 6, 2}, 3);
  EXPECT_EQ(again->predict(x).to_vector(), model->predict(x).to_vector());
  std::string written = io::decode_zip(io::read_file(dir.file("again.keras")), "again.keras")[1].data;
  EXPECT_NE(written.find(R"("class_name":"Functional")"), std::string::npos) << written;
  EXPECT_NE(written.find(R"("keras_history":["re_lu",0,0])"), std::string::npos) << written;
  auto from_json = model_from_json(model->to_json(), {.seed = 2});
  EXPECT_EQ(from_json->to_json(), model->to_json());
}

// Tandem's own functional models: to_json and model_from_json give the same model, weights
// (the same seed draws the same) and predictions, a shared layer's calls included.
TEST(FunctionalJson, TandemsOwnGraphsRoundTrip) {
  SymbolicTensor x = Input({6, 6, 2}, "image");
  auto shared = std::make_shared<Conv2D>(2, 3, Conv2DOptions{.padding = "same"});
  SymbolicTensor once = (*shared)(x);
  SymbolicTensor twice = (*shared)(ReLU()(once));
  SymbolicTensor h = BatchNormalization()(Subtract()({twice, Multiply()({once, once})}));
  Functional model(x, Dense(2)(GlobalAveragePooling2D({.keepdims = false})(ZeroPadding2D({0, 1, 2, 0})(h))),
                   {.name = "graph", .seed = 5});
  std::string text = model.to_json();
  EXPECT_NE(text.find(R"("inbound_nodes":[[["image",0,0,{}]],[["re_lu",0,0,{}]]])"), std::string::npos) << text;
  auto back = model_from_json(text, {.seed = 5});
  EXPECT_EQ(back->to_json(), text);
  EXPECT_EQ(back->summary(), model.summary());
  auto a = model.variables(), b = back->variables();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]->value.to_vector(), b[i]->value.to_vector()) << a[i]->name;
  Tensor input = testing::random_tensor({3, 6, 6, 2}, 7);
  EXPECT_EQ(back->predict(input).to_vector(), model.predict(input).to_vector());
}

TEST(FunctionalJson, BrokenGraphsAreNamed) {
  std::string good = kKeras2SharedLayer;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  auto refused = [&](const std::string& text, const std::string& part) {
    expect_error([&] { model_from_json(text, {.source = "f.json"}); }, part);
  };
  refused(with(R"([["add", 0, 0, {}]])", R"([["nothing", 0, 0, {}]])"),
          R"(f.json, layer 4 ("out"): the reference to "nothing" names no layer of the model)");
  refused(with(R"(["shared", 1, 0, {}])", R"(["shared", 2, 0, {}])"),
          R"(the reference to "shared" names its call 2, and it has 2 call(s))");
  refused(with(R"([["input_2", 0, 0, {}]]]})", R"([["out", 0, 0, {}]]]})"),
          R"(layer 2 ("shared"): its call 1 waits on outputs that wait on it)");
  refused(with(R"(["add", 0, 0, {}])", R"(["add", 0, 1, {}])"),
          "names output 1 of \"add\"; Tandem's layers have one output");
  refused(with(R"(["add", 0, 0, {}])", R"(["add", 0, 0, {"training": true}])"),
          "a call passes training=true; Tandem calls a layer on its inputs alone");
  refused(with(R"("name": "out", "inbound_nodes": [[["add", 0, 0, {}]]])", R"("name": "out", "inbound_nodes": [])"),
          R"(layer 4 ("out"): the layer is never called)");
  refused(with(R"("input_layers")", R"("extra": 1, "input_layers")"), R"(unknown key "extra")");
  refused(with(R"("output_layers": [["out", 0, 0]])", R"("output_layers": [["out", 0, 0], ["out", 0, 0]])"),
          R"(two outputs come from "out")");
  refused(with(R"("input_layers": [["input_1", 0, 0], ["input_2", 0, 0]])", R"("input_layers": [["input_1", 0, 0]])"),
          "that is not among");
  refused(with(R"("batch_input_shape": [null, 4], "dtype": "float32", "sparse": false,
   "ragged": false, "name": "input_1")",
               R"("dtype": "float32", "sparse": false, "ragged": false, "name": "input_1")"),
          "an InputLayer needs its shape");
  refused(with(R"("dtype": "float32"}, "name": "add")", R"("dtype": "float32"}, "name": "shared")"),
          R"(f.json, layer 3: named "shared", its config "add")");
  refused(with(R"("class_name": "Add")", R"("class_name": "Maximum")"), R"(unknown layer class "Maximum")");
}

}  // namespace
}  // namespace tandem
