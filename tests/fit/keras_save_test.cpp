// Keras 3's own files for a Sequential (src/fit/keras_files.cpp): .keras files and *.weights.h5
// round trip weights, optimizer state and compile settings exactly; their groups are where Keras 3
// looks for them; broken files are errors naming the file and what was found.
#include <gtest/gtest.h>

#include "tandem/io.h"
#include "tandem/keras_io.h"
#include "tandem/tandem.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;
using testing::expect_error;

std::unique_ptr<Model> mlp(int64_t hidden = 16) {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 5});
  m->add(Dense(hidden, "relu", {.input_shape = Shape{8}}));
  m->add(Dropout(0.25f));
  m->add(Dense(3, "softmax"));
  return m;
}

std::unique_ptr<Model> convnet() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 6});
  m->add(Conv2D(4, Size2(3), {.padding = "same", .activation = "relu", .input_shape = Shape{6, 6, 2}}));
  m->add(BatchNormalization());
  m->add(MaxPooling2D(Size2(2)));
  m->add(Flatten());
  m->add(Dense(3, "softmax"));
  return m;
}

void train(Model& m, const Shape& per_sample) {
  Shape x_shape{24};
  for (int64_t d : per_sample) x_shape.push_back(d);
  Tensor x = testing::random_tensor(x_shape, 11);
  std::vector<int32_t> labels(24);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 3);
  m.fit(x, Tensor::from_vector({24}, labels), {.epochs = 2, .batch_size = 8, .verbose = 0});
}

void expect_same_state(Model& a, Model& b) {
  auto sa = a.state(), sb = b.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    if (sa[i].second.dtype() == DType::Float32)
      EXPECT_EQ(sa[i].second.to_vector(), sb[i].second.to_vector()) << sa[i].first;
    else EXPECT_EQ(sa[i].second.data<int32_t>()[0], sb[i].second.data<int32_t>()[0]) << sa[i].first;
  }
}

TEST(KerasSave, KerasFileRoundTripsModelWeightsAndOptimizer) {
  testing::TempDir dir;
  auto m = mlp();
  m->compile(optimizers::Adam(0.01f, {.beta_1 = 0.8f}), "sparse_categorical_crossentropy", {"accuracy"});
  train(*m, {8});
  m->save(dir.file("m.keras"));
  auto back = load_model(dir.file("m.keras"), {.seed = 5});
  ASSERT_TRUE(back->compiled());
  EXPECT_EQ(back->optimizer().name(), "Adam");
  EXPECT_EQ(back->optimizer().current_learning_rate(), 0.01f);
  EXPECT_EQ(back->optimizer().iterations(), m->optimizer().iterations());
  EXPECT_EQ(back->metric_names(), std::vector<std::string>{"accuracy"});
  expect_same_state(*m, *back);
  Tensor x = testing::random_tensor({5, 8}, 3);
  EXPECT_EQ(m->predict(x).to_vector(), back->predict(x).to_vector());
  // The config is Keras 3's.
  auto entries = io::decode_zip(io::read_file(dir.file("m.keras")), "m.keras");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "metadata.json");
  EXPECT_NE(entries[0].data.find("\"keras_version\":\"3."), std::string::npos) << entries[0].data;
  const std::string& config = entries[1].data;
  for (const char* part :
       {R"("module":"keras")", R"("class_name":"Sequential")", R"("build_config":{"input_shape":[null,8]})",
        R"("compile_config":{)", R"("beta_1":0.8)", R"("class_name":"DTypePolicy")", R"("module":"keras.initializers")",
        R"("batch_shape":[null,8])"})
    EXPECT_NE(config.find(part), std::string::npos) << part << " in " << config;
}

TEST(KerasSave, WeightsH5RoundTripsAndKeepsKerasGroups) {
  testing::TempDir dir;
  auto m = convnet();
  m->compile(optimizers::RMSprop(0.01f, {.momentum = 0.5f}), "sparse_categorical_crossentropy");
  train(*m, {6, 6, 2});
  m->save_weights(dir.file("w.weights.h5"));
  std::string bytes = io::read_file(dir.file("w.weights.h5"));
  ASSERT_TRUE(io::is_hdf5(bytes));
  auto groups = io::decode_keras_weights(bytes, "w.weights.h5");
  std::vector<std::string> paths;
  for (const auto& g : groups) paths.push_back(g.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"", "layers/batch_normalization", "layers/conv2d", "layers/dense",
                                             "layers/flatten", "layers/max_pooling2d", "optimizer"}));
  EXPECT_EQ(groups[1].values.size(), 4u);  // gamma, beta, moving_mean, moving_variance
  EXPECT_EQ(groups[2].values[0].shape(), (Shape{3, 3, 2, 4}));
  // RMSprop: iteration, learning_rate, every velocity, then every momentum (conv kernel, conv bias,
  // gamma, beta, dense kernel, dense bias).
  const auto& opt = groups.back().values;
  ASSERT_EQ(opt.size(), 2u + 2 * 6);
  EXPECT_EQ(opt[0].data<int32_t>()[0], m->optimizer().iterations());
  auto st = m->state();
  auto find = [&](const std::string& n) {
    for (auto& [name, t] : st)
      if (name == n) return t.to_vector();
    ADD_FAILURE() << n;
    return std::vector<float>{};
  };
  EXPECT_EQ(opt[2].to_vector(), find("optimizer/conv2d/kernel/rms"));
  EXPECT_EQ(opt[8].to_vector(), find("optimizer/conv2d/kernel/momentum"));
  EXPECT_EQ(opt[13].to_vector(), find("optimizer/dense/bias/momentum"));

  auto fresh = convnet();
  fresh->compile(optimizers::RMSprop(0.01f, {.momentum = 0.5f}), "sparse_categorical_crossentropy");
  fresh->build({6, 6, 2});
  fresh->load_weights(dir.file("w.weights.h5"));
  expect_same_state(*m, *fresh);
  Tensor x = testing::random_tensor({4, 6, 6, 2}, 9);
  EXPECT_EQ(m->predict(x).to_vector(), fresh->predict(x).to_vector());
  // Other names keep safetensors.
  m->save_weights(dir.file("w.safetensors"));
  EXPECT_FALSE(io::is_hdf5(io::read_file(dir.file("w.safetensors"))));
}

TEST(KerasSave, BrokenFilesAreNamedErrors) {
  testing::TempDir dir;
  auto m = mlp();
  m->compile("adam", "sparse_categorical_crossentropy");
  m->build({8});
  m->save(dir.file("m.keras"));
  std::string good = io::read_file(dir.file("m.keras"));

  io::write_file_atomically(dir.file("cut.keras"), good.substr(0, good.size() / 2));
  expect_error([&] { load_model(dir.file("cut.keras")); }, "cut.keras\" is a damaged zip archive");
  io::write_file_atomically(dir.file("text.keras"), "hello");
  expect_error([&] { load_model(dir.file("text.keras")); }, "text.keras\" is not a zip archive");
  auto entries = io::decode_zip(good, "m.keras");
  io::write_file_atomically(dir.file("noconfig.keras"), io::encode_zip({entries[0], entries[2]}));
  expect_error([&] { load_model(dir.file("noconfig.keras")); }, "has no config.json");
  io::write_file_atomically(dir.file("noweights.keras"), io::encode_zip({entries[0], entries[1]}));
  expect_error([&] { load_model(dir.file("noweights.keras")); }, "has no model.weights.h5");

  // Weights of a wider first layer.
  auto wide = mlp(32);
  wide->build({8});
  wide->save_weights(dir.file("wide.weights.h5"));
  auto narrow = mlp(16);
  narrow->build({8});
  expect_error([&] { narrow->load_weights(dir.file("wide.weights.h5")); },
               "layer 'dense' (layers/dense/vars/0) has kernel float32 (8, 32), the model expects float32 (8, 16)");
  // A model with a layer the file lacks.
  auto deeper = std::make_unique<Sequential>(SequentialOptions{.seed = 5});
  deeper->add(Dense(32, "relu", {.input_shape = Shape{8}}));
  deeper->add(Dense(3));
  deeper->add(Dense(3));
  deeper->build({8});
  expect_error([&] { deeper->load_weights(dir.file("wide.weights.h5")); }, "holds 0 weights for layer 'dense_2'");
  io::write_file_atomically(dir.file("junk.weights.h5"), std::string("\x89HDF\r\n\x1a\n", 8) + "junk");
  expect_error([&] { narrow->load_weights(dir.file("junk.weights.h5")); }, "junk.weights.h5\": HDF5 cannot open it");
}

// config.json as Keras 3.16 writes it for Sequential([Input((4,)), Dense(2)]) compiled with SGD,
// and weights as H5IOStore lays them out: Tandem reads Keras' own file.
TEST(KerasSave, KerasOwnFileLoads) {
  testing::TempDir dir;
  std::string config = R"({"module": "keras", "class_name": "Sequential", "config": {"name": "sequential",
    "trainable": true, "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
    "registered_name": null}, "layers": [{"module": "keras.layers", "class_name": "InputLayer", "config":
    {"batch_shape": [null, 4], "dtype": "float32", "sparse": false, "ragged": false, "name": "input_layer",
    "optional": false}, "registered_name": null}, {"module": "keras.layers", "class_name": "Dense", "config":
    {"name": "dense", "trainable": true, "dtype": {"module": "keras", "class_name": "DTypePolicy", "config":
    {"name": "float32"}, "registered_name": null}, "units": 2, "activation": "linear", "use_bias": true,
    "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null},
    "registered_name": null}, "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros",
    "config": {}, "registered_name": null}, "kernel_regularizer": null, "bias_regularizer": null,
    "kernel_constraint": null, "bias_constraint": null, "quantization_config": null}, "registered_name": null,
    "build_config": {"input_shape": [null, 4]}}], "build_input_shape": [null, 4]}, "registered_name": null,
    "build_config": {"input_shape": [null, 4]}, "compile_config": {"optimizer": {"module": "keras.optimizers",
    "class_name": "SGD", "config": {"name": "SGD", "learning_rate": 0.05, "weight_decay": null, "clipnorm": null,
    "global_clipnorm": null, "clipvalue": null, "use_ema": false, "ema_momentum": 0.99,
    "ema_overwrite_frequency": null, "loss_scale_factor": null, "gradient_accumulation_steps": null,
    "momentum": 0.9, "nesterov": false}, "registered_name": null}, "loss": "mean_squared_error",
    "loss_weights": null, "metrics": null, "weighted_metrics": null, "run_eagerly": false,
    "steps_per_execution": 1, "jit_compile": false}})";
  Tensor kernel = testing::random_tensor({4, 2}, 1), bias = testing::random_tensor({2}, 2);
  Tensor momentum_k = testing::random_tensor({4, 2}, 3), momentum_b = testing::random_tensor({2}, 4);
  std::string weights = io::encode_keras_weights({{"", "sequential", {}},
                                                  {"layers/dense", "dense", {kernel, bias}},
                                                  {"optimizer",
                                                   "SGD",
                                                   {Tensor::from_vector({1}, std::vector<int32_t>{12}).reshape(Shape()),
                                                    Tensor::full(Shape(), 0.05f), momentum_k, momentum_b}}});
  io::write_file_atomically(dir.file("k.keras"),
                            io::encode_zip({{"metadata.json", R"({"keras_version": "3.16.0", "date_saved": "x"})"},
                                            {"config.json", config},
                                            {"model.weights.h5", weights}}));
  auto m = load_model(dir.file("k.keras"));
  EXPECT_EQ(m->optimizer().name(), "SGD");
  EXPECT_EQ(m->optimizer().iterations(), 12);
  EXPECT_EQ(m->loss().name(), "mean_squared_error");
  auto st = m->state();
  ASSERT_EQ(st.size(), 5u);  // kernel, bias, iterations, the two momenta
  EXPECT_EQ(st[0].second.to_vector(), kernel.to_vector());
  EXPECT_EQ(st[1].second.to_vector(), bias.to_vector());
  EXPECT_EQ(st[3].first, "optimizer/dense/kernel/momentum");
  EXPECT_EQ(st[3].second.to_vector(), momentum_k.to_vector());
  EXPECT_EQ(st[4].second.to_vector(), momentum_b.to_vector());
}

}  // namespace
}  // namespace tandem
