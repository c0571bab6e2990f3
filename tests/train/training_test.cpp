// End-to-end training on small generated data: loss falls, accuracy rises far above chance,
// runs are reproducible, and weights survive a save/load round trip.
#include <fstream>

#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

// Ten classes, each a random prototype plus noise: learnable, but not by a constant guess.
struct Blobs {
  Tensor x, y;
};
Blobs make_blobs(int64_t n, int64_t features, uint64_t seed, float noise = 0.8f) {
  Tensor protos = testing::random_tensor({10, features}, seed);
  Tensor x = Tensor::empty({n, features});
  std::vector<int32_t> labels(static_cast<size_t>(n));
  Philox rng(seed, 99);
  for (int64_t i = 0; i < n; ++i) {
    int32_t c = static_cast<int32_t>(rng.bits(static_cast<uint64_t>(i)) % 10);
    labels[static_cast<size_t>(i)] = c;
    for (int64_t j = 0; j < features; ++j)
      x.data<float>()[i * features + j] =
          protos.data<float>()[c * features + j] + noise * rng.normal(static_cast<uint64_t>(n + i * features + j));
  }
  return {x, Tensor::from_vector({n}, std::span<const int32_t>(labels))};
}

std::unique_ptr<Model> reference_mlp(int64_t features, uint64_t seed = 0) {
  auto model = std::make_unique<Sequential>(SequentialOptions{.seed = seed});
  model->add(Dense(128, "relu", {.input_shape = Shape{features}}));
  model->add(Dropout(0.2f));
  model->add(Dense(10, "softmax"));
  model->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  return model;
}

// Issue 11, item 1: a softmax in a layer of its own is the same model as one inside the Dense,
// whether the loss is told it gets probabilities or (by mistake) logits: one softmax, the same
// loss and the same gradients. Before, a loss told from_logits applied a second softmax.
TEST(Training, SoftmaxSpelledAsItsOwnLayerTrainsAsInsideTheDense) {
  Blobs data = make_blobs(200, 16, 3);
  auto make = [](bool own_layer, bool from_logits) {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 4});
    m->add(Dense(32, "relu", {.input_shape = Shape{16}}));
    if (own_layer) {
      m->add(Dense(10));
      m->add(layers::Activation("softmax"));
    } else {
      m->add(Dense(10, "softmax"));
    }
    m->compile(optimizers::SGD(0.1f), Loss::sparse_categorical_crossentropy(from_logits), {"accuracy"});
    return m;
  };
  auto reference = make(false, false);
  Tensor x = data.x.slice(0, 50), y = data.y.slice(0, 50);
  auto loss_and_gradients = [&](Model& m) {
    GradientTape tape;
    Tensor loss = ops::mean(m.loss().per_sample(y, m(x, false)));
    std::vector<Variable*> vars = m.trainable_variables();
    std::vector<std::vector<float>> out{loss.to_vector()};
    for (const Tensor& g : tape.gradient(loss, vars)) out.push_back(g.to_vector());
    return out;
  };
  auto expected = loss_and_gradients(*reference);
  for (bool from_logits : {false, true}) {
    auto model = make(true, from_logits);
    auto got = loss_and_gradients(*model);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      std::vector<double> ref(expected[i].begin(), expected[i].end());
      EXPECT_TRUE(testing::all_close(std::vector<double>(got[i].begin(), got[i].end()), ref, 1e-6, 1e-5))
          << "from_logits=" << from_logits << ", " << (i == 0 ? "loss" : "gradient " + std::to_string(i - 1));
    }
    History h = model->fit(data.x, data.y, {.epochs = 2, .batch_size = 25, .verbose = 0});
    History r = make(false, false)->fit(data.x, data.y, {.epochs = 2, .batch_size = 25, .verbose = 0});
    EXPECT_NEAR(h["loss"].back(), r["loss"].back(), 1e-5) << "from_logits=" << from_logits;
  }
}

TEST(Training, ReferenceMlpLearnsBlobs) {
  Blobs train = make_blobs(2000, 64, 1), test = make_blobs(500, 64, 1);
  auto model = reference_mlp(64);
  Logs before = model->evaluate(test.x, test.y);
  History h = model->fit(train.x, train.y, {.epochs = 5, .batch_size = 25, .validation_split = 0.1, .verbose = 0});
  ASSERT_EQ(h["loss"].size(), 5u);
  EXPECT_LT(h["loss"].back(), 0.5 * h["loss"].front());
  EXPECT_GT(h["accuracy"].back(), 0.9);
  EXPECT_EQ(h["val_accuracy"].size(), 5u);
  Logs after = model->evaluate(test.x, test.y);
  EXPECT_LT(log_value(after, "loss"), log_value(before, "loss"));
  EXPECT_LT(log_value(before, "accuracy"), 0.3);
  EXPECT_GT(log_value(after, "accuracy"), 0.9);
  Tensor p = model->predict(test.x, 64);
  EXPECT_EQ(p.shape(), (Shape{500, 10}));
  double row = 0;
  for (int j = 0; j < 10; ++j) row += p.data<float>()[j];
  EXPECT_NEAR(row, 1.0, 1e-5);
}

TEST(Training, SameSeedSameWeightsBitwise) {
  Blobs train = make_blobs(300, 16, 2);
  auto a = reference_mlp(16, 7), b = reference_mlp(16, 7);
  a->fit(train.x, train.y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  b->fit(train.x, train.y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  for (size_t i = 0; i < a->variables().size(); ++i)
    EXPECT_EQ(a->variables()[i]->value.to_vector(), b->variables()[i]->value.to_vector());
}

TEST(Training, EveryOptimizerAndLossReducesTheLoss) {
  Blobs train = make_blobs(400, 16, 3);
  Tensor onehot = Tensor::zeros({400, 10});
  for (int64_t i = 0; i < 400; ++i) onehot.data<float>()[i * 10 + train.y.data<int32_t>()[i]] = 1.0f;
  struct Case {
    std::unique_ptr<Optimizer> opt;
    Loss loss;
    std::string last;
    bool sparse;
  };
  std::vector<Case> cases;
  cases.push_back({std::make_unique<optimizers::SGD>(0.05f, optimizers::SGDOptions{.momentum = 0.9f, .nesterov = true}),
                   "categorical_crossentropy", "softmax", false});
  cases.push_back(
      {std::make_unique<optimizers::RMSprop>(0.01f), Loss::sparse_categorical_crossentropy(true), "", true});
  cases.push_back({std::make_unique<optimizers::Adagrad>(0.1f), "binary_crossentropy", "sigmoid", false});
  cases.push_back({std::make_unique<optimizers::Adam>(), "mse", "", false});
  for (auto& c : cases) {
    Sequential model;
    model.add(Dense(32, "tanh", {.input_shape = Shape{16}}));
    model.add(Dense(10, c.last));
    std::string name = c.opt->name() + "/" + c.loss.name();
    model.compile(std::move(c.opt), c.loss, {"accuracy"});
    History h = model.fit(train.x, c.sparse ? train.y : onehot, {.epochs = 4, .batch_size = 20, .verbose = 0});
    EXPECT_LT(h["loss"].back(), 0.7 * h["loss"].front()) << name;
    EXPECT_GT(h["accuracy"].back(), 0.5) << name;
  }
}

TEST(Training, CnnWithBatchNormLearns) {
  // 8x8 single-channel images whose class is the quadrant holding a bright square.
  const int64_t n = 400;
  Tensor x = Tensor::zeros({n, 8, 8, 1});
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    int q = static_cast<int>(i % 4);
    labels[static_cast<size_t>(i)] = q;
    int oy = (q / 2) * 4 + static_cast<int>(i % 3), ox = (q % 2) * 4 + static_cast<int>((i / 3) % 3);
    for (int dy = 0; dy < 2; ++dy)
      for (int dx = 0; dx < 2; ++dx) x.data<float>()[((i * 8) + oy + dy) * 8 + ox + dx] = 1.0f;
  }
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));
  Sequential model;
  model.add(Conv2D(8, 3, {.padding = "same", .activation = "relu", .input_shape = Shape{8, 8, 1}}));
  model.add(BatchNormalization());
  model.add(MaxPooling2D());
  model.add(Flatten());
  model.add(Dense(4));
  model.compile(optimizers::Adam(0.01f), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  History h = model.fit(x, y, {.epochs = 5, .batch_size = 16, .verbose = 0});
  EXPECT_GT(h["accuracy"].back(), 0.95);
  EXPECT_GT(log_value(model.evaluate(x, y), "accuracy"), 0.95);
}

// Float labels for sparse cross-entropy must be class indices: a NaN, an infinity, a fraction or a
// value past int32 is refused before any step, naming the row and the value (a cast would make it
// some class, or undefined behaviour), in fit, in validation data, in the op and in the metric.
TEST(Training, BadFloatLabelsAreRefusedNamingTheirRowAndValue) {
  Blobs data = make_blobs(8, 4, 3);
  struct Bad {
    float value;
    std::string shown;
  };
  for (Bad bad :
       {Bad{std::nanf(""), "label nan at row 3"}, Bad{INFINITY, "label inf at row 3"}, Bad{1.5f, "label 1.5 at row 3"},
        Bad{-0.5f, "label -0.5 at row 3"},
        Bad{3e9f, "label 3000000000 at row 3 is not a class index (labels must be whole numbers within int32"}}) {
    std::vector<float> labels{0, 1, 2, 3, 4, 5, 6, 7};
    labels[3] = bad.value;
    Tensor y = Tensor::from_vector({8}, std::span<const float>(labels));
    auto model = reference_mlp(4);
    auto before = model->variables()[0]->value.to_vector();
    std::string error = testing::error_of([&] { model->fit(data.x, y, {.epochs = 1, .batch_size = 4, .verbose = 0}); });
    EXPECT_NE(error.find("fit: y: " + bad.shown), std::string::npos) << error;
    EXPECT_EQ(model->variables()[0]->value.to_vector(), before) << "no step ran";
    error = testing::error_of([&] {
      model->fit(data.x, data.y, {.epochs = 1, .batch_size = 4, .validation_data = std::pair{data.x, y}, .verbose = 0});
    });
    EXPECT_NE(error.find("validation_data: y: " + bad.shown), std::string::npos) << error;
    EXPECT_EQ(model->variables()[0]->value.to_vector(), before) << "no step ran before the validation labels' check";
    error = testing::error_of([&] { (void)ops::sparse_softmax_cross_entropy(testing::random_tensor({8, 10}, 1), y); });
    EXPECT_NE(error.find("sparse_categorical_crossentropy: " + bad.shown), std::string::npos) << error;
  }
  std::vector<float> whole{0, 1, 2, 3, 4, 5, 6, 7};  // float labels that are class indices train
  auto model = reference_mlp(4);
  model->fit(data.x, Tensor::from_vector({8}, std::span<const float>(whole)),
             {.epochs = 1, .batch_size = 4, .verbose = 0});
  std::vector<float> nan_values{1.0f, std::nanf("")};
  EXPECT_NE(testing::error_of([&] {
              (void)Tensor::from_vector({2}, std::span<const float>(nan_values)).astype(DType::Int32);
            }).find("astype(int32): element 1 is nan"),
            std::string::npos);
}

TEST(Training, SaveAndLoadWeightsRoundTrip) {
  testing::TempDir dir;
  Blobs train = make_blobs(200, 16, 4);
  auto a = reference_mlp(16, 1);
  a->fit(train.x, train.y, {.epochs = 1, .batch_size = 20, .verbose = 0});
  a->save_weights(dir.file("w.bin"));
  auto b = reference_mlp(16, 1);  // same seed: the dropout stream is keyed by it
  for (Variable* v : b->variables()) v->value.fill(0.01f);
  EXPECT_NE(a->predict(train.x).to_vector(), b->predict(train.x).to_vector());
  b->load_weights(dir.file("w.bin"));
  EXPECT_EQ(a->predict(train.x).to_vector(), b->predict(train.x).to_vector());
  EXPECT_EQ(b->optimizer().iterations(), a->optimizer().iterations());
  // Training on from the loaded state matches training on from the original, bitwise.
  a->fit(train.x, train.y, {.epochs = 1, .batch_size = 20, .shuffle = false, .verbose = 0});
  b->fit(train.x, train.y, {.epochs = 1, .batch_size = 20, .shuffle = false, .verbose = 0});
  EXPECT_EQ(a->predict(train.x).to_vector(), b->predict(train.x).to_vector());
}

TEST(Training, BrokenWeightFilesAreErrors) {
  testing::TempDir dir;
  auto a = reference_mlp(16);
  a->save_weights(dir.file("w.bin"));
  std::ifstream in(dir.file("w.bin"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir.file("short.bin"), std::ios::binary) << bytes.substr(0, bytes.size() - 10);
  EXPECT_TRUE(testing::throws_error([&] { a->load_weights(dir.file("short.bin")); },
                                    {"short.bin", "optimizer/dense_1/bias/v", "fall outside the"}));
  std::ofstream(dir.file("junk.bin"), std::ios::binary) << "hello world, not weights";
  EXPECT_TRUE(testing::throws_error([&] { a->load_weights(dir.file("junk.bin")); },
                                    {"junk.bin", "byte offset 0", "header length"}));
  auto other = std::make_unique<Sequential>();
  other->add(Dense(64, "relu", {.input_shape = Shape{16}}));
  other->add(Dense(10));
  EXPECT_TRUE(testing::throws_error([&] { other->load_weights(dir.file("w.bin")); },
                                    {"dense/kernel", "(16, 128)", "expects float32 (16, 64)"}));
  EXPECT_TRUE(testing::throws_error([&] { a->load_weights(dir.file("nope.bin")); }, {"cannot open", "nope.bin"}));
}

class Recorder : public Callback {
 public:
  void on_train_begin(const Logs&) override { events.push_back("train_begin"); }
  void on_epoch_begin(int e, const Logs&) override { events.push_back("epoch_begin " + std::to_string(e)); }
  void on_batch_end(int64_t, const Logs& logs) override {
    ++batches;
    last_loss = log_value(logs, "loss");
  }
  void on_epoch_end(int e, const Logs& logs) override {
    events.push_back("epoch_end " + std::to_string(e));
    if (log_value(logs, "accuracy") >= 0.0 && e == 1) model->stop_training = true;
  }
  void on_train_end(const Logs&) override { events.push_back("train_end"); }
  std::vector<std::string> events;
  int batches = 0;
  double last_loss = -1;
};

TEST(Training, CallbacksSeeEveryEventAndCanStop) {
  Blobs train = make_blobs(100, 8, 5);
  auto model = reference_mlp(8);
  auto rec = std::make_shared<Recorder>();
  History h = model->fit(train.x, train.y, {.epochs = 10, .batch_size = 25, .callbacks = {rec}, .verbose = 0});
  EXPECT_EQ(rec->events, (std::vector<std::string>{"train_begin", "epoch_begin 0", "epoch_end 0", "epoch_begin 1",
                                                   "epoch_end 1", "train_end"}));
  EXPECT_EQ(rec->batches, 8);
  EXPECT_GT(rec->last_loss, 0.0);
  EXPECT_EQ(h["loss"].size(), 2u);
}

TEST(Schedules, ExponentialAndPiecewise) {
  ExponentialDecay e(0.1f, 10, 0.5f);
  EXPECT_FLOAT_EQ(e(0), 0.1f);
  EXPECT_NEAR(e(5), 0.1 * std::pow(0.5, 0.5), 1e-7);
  ExponentialDecay s(0.1f, 10, 0.5f, true);
  EXPECT_FLOAT_EQ(s(15), 0.05f);
  PiecewiseConstantDecay p({100, 200}, {1.0f, 0.5f, 0.1f});
  EXPECT_EQ(p(100), 1.0f);
  EXPECT_EQ(p(101), 0.5f);
  EXPECT_EQ(p(1000), 0.1f);
  EXPECT_TRUE(testing::throws_error(
      [] {
        PiecewiseConstantDecay({1, 2}, {1.0f});
      },
      {"2 boundaries need 3 values, got 1"}));
  optimizers::SGD sgd(1.0f);
  sgd.set_learning_rate(
      std::make_shared<PiecewiseConstantDecay>(std::vector<int64_t>{0}, std::vector<float>{0.5f, 0.25f}));
  Variable v{"v", Tensor::full({1}, 1.0f)};
  Variable* vars[] = {&v};
  Tensor g[] = {Tensor::full({1}, 1.0f)};
  sgd.apply(vars, g);  // step 0: lr 0.5
  sgd.apply(vars, g);  // step 1: lr 0.25
  EXPECT_FLOAT_EQ(v.value.item(), 1.0f - 0.5f - 0.25f);
}

TEST(GradientTape, CustomLoopMatchesFit) {
  // One step through the tape by hand equals one step of fit (no dropout, no shuffle).
  Blobs train = make_blobs(32, 8, 6);
  auto make = [] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
    m->add(Dense(16, "elu", {.input_shape = Shape{8}}));
    m->add(Dense(10, "softmax"));
    m->compile(optimizers::SGD(0.1f, {.momentum = 0.9f}), "sparse_categorical_crossentropy");
    return m;
  };
  auto a = make(), b = make();
  a->fit(train.x, train.y, {.epochs = 1, .batch_size = 32, .shuffle = false, .verbose = 0});
  std::vector<Variable*> vars = b->trainable_variables();
  std::vector<Tensor> sources;
  for (Variable* v : vars) sources.push_back(v->value);
  GradientTape tape;
  Tensor loss = ops::mean(b->loss().per_sample(train.y, (*b)(train.x, true)));
  b->optimizer().apply(vars, tape.gradient(loss, sources));
  for (size_t i = 0; i < vars.size(); ++i)
    EXPECT_TRUE(testing::all_close(a->variables()[i]->value, testing::to_double(vars[i]->value), 1e-6, 1e-5));
  EXPECT_TRUE(testing::throws_error([&] { tape.gradient(loss, sources); }, {"called twice on a non-persistent tape"}));
}

}  // namespace
}  // namespace tandem
