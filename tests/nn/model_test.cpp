// Sequential: building, summary, and every bad call a user can make.
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

Tensor labels(int64_t n, int classes) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(i % classes);
  return Tensor::from_vector({n}, std::span<const int32_t>(v));
}

TEST(Sequential, SummaryMatchesKeras) {
  Sequential model;
  model.add(Dense(128, "relu", {.input_shape = Shape{784}}));
  model.add(Dropout(0.2f));
  model.add(Dense(10, "softmax"));
  std::string s = model.summary();
  EXPECT_NE(s.find("Model: \"sequential\""), std::string::npos) << s;
  EXPECT_NE(s.find(" dense (Dense)               (None, 128)               100480"), std::string::npos) << s;
  EXPECT_NE(s.find(" dropout (Dropout)           (None, 128)               0"), std::string::npos) << s;
  EXPECT_NE(s.find(" dense_1 (Dense)             (None, 10)                1290"), std::string::npos) << s;
  EXPECT_NE(s.find("Total params: 101,770"), std::string::npos) << s;
  EXPECT_NE(s.find("Trainable params: 101,770"), std::string::npos) << s;
  EXPECT_EQ(model.count_params(), 101770);
}

TEST(Sequential, CnnShapesAndBatchNormCounts) {
  Sequential model;
  model.add(Conv2D(32, 3, {.activation = "relu", .input_shape = Shape{28, 28, 1}}));
  model.add(MaxPooling2D());
  model.add(BatchNormalization());
  model.add(AveragePooling2D(2, {.padding = "same"}));
  model.add(Flatten());
  model.add(Dense(64, "relu"));
  model.add(layers::Activation("gelu"));
  model.add(Dense(10));
  auto& ls = model.layers();
  EXPECT_EQ(ls[0]->output_shape(), (Shape{26, 26, 32}));
  EXPECT_EQ(ls[1]->output_shape(), (Shape{13, 13, 32}));
  EXPECT_EQ(ls[3]->output_shape(), (Shape{7, 7, 32}));
  EXPECT_EQ(ls[4]->output_shape(), (Shape{7 * 7 * 32}));
  EXPECT_EQ(ls[0]->count_params(), 3 * 3 * 1 * 32 + 32);
  EXPECT_EQ(ls[2]->count_params(), 4 * 32);
  EXPECT_EQ(model.trainable_variables().size(), model.variables().size() - 2);  // moving stats
  std::string s = model.summary();
  EXPECT_NE(s.find("Non-trainable params: 64"), std::string::npos) << s;
  Tensor y = model(testing::random_tensor({2, 28, 28, 1}, 1));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
}

TEST(Sequential, InitializersAreSeededAndDistinct) {
  auto make = [](uint64_t seed) {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = seed});
    m->add(Dense(64, "relu", {.kernel_initializer = "he_normal", .input_shape = Shape{32}}));
    m->add(Dense(8, "", {.kernel_initializer = "truncated_normal"}));
    return m;
  };
  auto a = make(1), b = make(1), c = make(2);
  EXPECT_EQ(a->variables()[0]->value.to_vector(), b->variables()[0]->value.to_vector());
  EXPECT_NE(a->variables()[0]->value.to_vector(), c->variables()[0]->value.to_vector());
  // he_normal: std ≈ sqrt(2/32) = 0.25; truncated_normal: |w| ≤ 0.1.
  std::vector<float> k = a->variables()[0]->value.to_vector();
  double ss = 0;
  for (float v : k) ss += v * v;
  EXPECT_NEAR(std::sqrt(ss / k.size()), 0.25, 0.03);
  for (float v : a->variables()[2]->value.to_vector()) EXPECT_LE(std::fabs(v), 0.1f);
}

TEST(Errors, LayerArguments) {
  EXPECT_TRUE(testing::throws_error([] { Dense(10, "relux"); },
                                    {"Dense \"dense\"", "unknown activation \"relux\"", "relu, elu"}));
  EXPECT_TRUE(testing::throws_error([] { Dense(0); }, {"Dense", "units must be positive, got 0"}));
  EXPECT_TRUE(testing::throws_error([] { Dense(4, "", {.kernel_initializer = "glorot"}); },
                                    {"unknown initializer \"glorot\""}));
  EXPECT_TRUE(testing::throws_error([] { Dropout(1.5f); }, {"Dropout", "rate must be in [0, 1), got 1.5"}));
  EXPECT_TRUE(testing::throws_error([] { Conv2D(8, 3, {.padding = "full"}); }, {"Conv2D", "unknown padding \"full\""}));
  EXPECT_TRUE(testing::throws_error([] { Conv2D(8, 0); }, {"Conv2D", "kernel_size must be positive"}));
  EXPECT_TRUE(
      testing::throws_error([] { MaxPooling2D(2, {.strides = Size2(0)}); }, {"MaxPooling2D", "must be positive"}));
  EXPECT_TRUE(
      testing::throws_error([] { layers::Activation("swishy"); }, {"Activation", "unknown activation \"swishy\""}));
}

TEST(Errors, ShapeMismatches) {
  Sequential model;
  model.add(Dense(16, "relu", {.input_shape = Shape{784}}));
  model.add(Dense(10));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        model(Tensor::zeros({2, 780}));
      },
      {"Dense \"dense\"", "780 features", "expected 784"}));
  Sequential image;
  EXPECT_TRUE(testing::throws_error(
      [&] {
        image.add(Dense(4, "", {.input_shape = Shape{28, 28}}));
      },
      {"Dense \"dense\"", "add a Flatten layer"}));
  Sequential conv;
  EXPECT_TRUE(testing::throws_error(
      [&] {
        conv.add(Conv2D(4, 5, {.input_shape = Shape{3, 3, 1}}));
      },
      {"Conv2D \"conv2d\"", "kernel 5x5 does not fit inputs of 3x3"}));
  Sequential twice;
  twice.add(Dense(4, "", {.name = "same"}));
  EXPECT_TRUE(testing::throws_error([&] { twice.add(Dense(4, "", {.name = "same"})); }, {"\"same\" already exists"}));
}

TEST(Errors, CompileAndFitArguments) {
  Sequential model;
  model.add(Dense(4, "softmax", {.input_shape = Shape{3}}));
  Tensor x = Tensor::zeros({10, 3}), y = labels(10, 4);
  EXPECT_TRUE(testing::throws_error([&] { model.fit(x, y); }, {"fit needs a compiled model", "compile("}));
  EXPECT_TRUE(testing::throws_error([&] { model.evaluate(x, y); }, {"evaluate needs a compiled model"}));
  EXPECT_TRUE(
      testing::throws_error([&] { model.compile("adamax", "mse"); }, {"unknown optimizer \"adamax\"", "adamw"}));
  EXPECT_TRUE(testing::throws_error([&] { model.compile("adam", "hinge"); }, {"unknown loss \"hinge\""}));
  EXPECT_TRUE(testing::throws_error([&] { model.compile("adam", "mse", {"f1"}); }, {"unknown metric \"f1\""}));
  EXPECT_TRUE(
      testing::throws_error([] { optimizers::Adam(-1.0f); }, {"learning_rate must be a positive number, got -1"}));
  EXPECT_TRUE(testing::throws_error([] { optimizers::SGD(0.1f, {.momentum = 1.5f}); }, {"SGD", "momentum", "1.5"}));
  model.compile("adam", "sparse_categorical_crossentropy", {"accuracy"});
  EXPECT_TRUE(
      testing::throws_error([&] { model.fit(x, y, {.batch_size = 0}); }, {"batch_size must be positive, got 0"}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        model.fit(Tensor::zeros({0, 3}), labels(0, 4));
      },
      {"x is empty (0 samples)"}));
  EXPECT_TRUE(testing::throws_error([&] { model.fit(x, labels(9, 4)); }, {"x has 10 samples but y has 9"}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        model.fit(Tensor::zeros({10, 5}), y);
      },
      {"samples of shape (5,)", "expects (3,)"}));
  EXPECT_TRUE(testing::throws_error([&] { model.fit(x, labels(10, 7), {.verbose = 0}); },
                                    {"sparse_categorical_crossentropy: label", "out of range [0, 4)"}));
  EXPECT_TRUE(testing::throws_error([&] { model.fit(x, y, {.validation_split = 1.0}); },
                                    {"validation_split must be in [0, 1), got 1"}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        model.fit(x, Tensor::zeros({10, 4}));
      },
      {"labels must have shape (samples,), got (10, 4)"}));
  EXPECT_TRUE(testing::throws_error([&] { model.fit(x.astype(DType::UInt8), y); }, {"x must be float32, got uint8"}));
  EXPECT_TRUE(testing::throws_error([&] { model.predict(x, 0); }, {"predict: batch_size must be positive, got 0"}));
}

TEST(Errors, UnknownLogAndHistoryNames) {
  Logs logs{{"loss", 1.0}};
  EXPECT_TRUE(testing::throws_error([&] { log_value(logs, "acc"); }, {"no value named \"acc\"", "have: loss"}));
}

}  // namespace
}  // namespace tandem
