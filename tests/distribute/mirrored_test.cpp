// MirroredStrategy against the default strategy on the same global batch: the same weights
// after K steps (up to float summation order), mirrored variables identical after every step,
// and a failing replica stopping the step with one error.
#include <cmath>

#include "tandem/distribute/strategy.h"
#include "tandem/model.h"
#include "tandem/runtime.h"
#include "tandem/timeline.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

struct Data {
  Tensor x, y;
};
Data blobs(int64_t n, Shape per_sample) {
  Shape shape{n};
  for (int64_t d : per_sample) shape.push_back(d);
  Tensor x = testing::random_tensor(shape, 5);
  std::vector<int32_t> l(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) l[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  return {x, Tensor::from_vector({n}, std::span<const int32_t>(l))};
}

std::unique_ptr<Model> dense_model() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(Dense(16, "relu", {.input_shape = Shape{6}}));
  m->add(Dropout(0.3f));
  m->add(Dense(4, "softmax"));
  m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}

std::unique_ptr<Model> conv_model() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(Conv2D(4, 3, {.padding = "same", .activation = "relu", .input_shape = Shape{6, 6, 1}}));
  m->add(MaxPooling2D());
  m->add(Flatten());
  m->add(Dense(4));
  m->compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  return m;
}

// Dense → BatchNormalization → ReLU → Dense and a Conv2D → BatchNormalization model.
std::function<std::unique_ptr<Model>()> batch_norm_model(bool synchronized, bool conv = false) {
  return [=] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
    if (conv) m->add(Conv2D(4, 3, {.padding = "same", .input_shape = Shape{6, 6, 1}}));
    else m->add(Dense(8, "", {.input_shape = Shape{6}}));
    m->add(BatchNormalization({.momentum = 0.9f, .synchronized = synchronized}));
    m->add(layers::Activation("relu"));
    if (conv) m->add(Flatten());
    m->add(Dense(4));
    m->compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
    return m;
  };
}

class Mirrored : public ::testing::TestWithParam<int> {};

void expect_same_training(const std::function<std::unique_ptr<Model>()>& make, const Data& d, int replicas,
                          bool central = false) {
  auto reference = make();
  History h0 = reference->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
  std::unique_ptr<distribute::Strategy> owned;
  if (central) owned = std::make_unique<distribute::CentralStorageStrategy>(replicas, 1);
  else owned = std::make_unique<distribute::MirroredStrategy>(replicas, 1);
  distribute::Strategy& mirrored = *owned;
  std::unique_ptr<Model> model;
  {
    auto scope = mirrored.scope();
    model = make();
  }
  ASSERT_EQ(model->strategy(), &mirrored);
  History h1 = model->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
  auto a = reference->variables(), b = model->variables();
  for (size_t i = 0; i < a.size(); ++i) {
    auto va = a[i]->value.to_vector(), vb = b[i]->value.to_vector();
    std::vector<double> ref(va.begin(), va.end());
    EXPECT_TRUE(testing::all_close(b[i]->value, ref, 1e-6, 1e-5)) << a[i]->name << " with " << replicas << " replicas";
  }
  EXPECT_NEAR(h1["loss"].back(), h0["loss"].back(), 1e-5);
  for (int r = 1; r < replicas; ++r) {
    auto mine = model->replica_variables(r);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(mine[i]->value.to_vector(), b[i]->value.to_vector()) << "replica " << r;
      // Central storage: one copy of each variable, shared by the replicas.
      if (central) EXPECT_EQ(mine[i]->value.id(), b[i]->value.id());
      else EXPECT_NE(mine[i]->value.id(), b[i]->value.id());
    }
  }
}

TEST_P(Mirrored, DenseWithDropoutMatchesTheDefaultStrategy) {
  expect_same_training(dense_model, blobs(96, Shape{6}), GetParam());
}

TEST_P(Mirrored, ConvolutionMatchesTheDefaultStrategy) {
  expect_same_training(conv_model, blobs(48, Shape{6, 6, 1}), GetParam());
}

TEST_P(Mirrored, CentralStorageMatchesTheDefaultStrategy) {
  expect_same_training(dense_model, blobs(96, Shape{6}), GetParam(), true);
  expect_same_training(conv_model, blobs(48, Shape{6, 6, 1}), GetParam(), true);
}

TEST_P(Mirrored, SynchronizedBatchNormalizationMatchesTheDefaultStrategy) {
  expect_same_training(batch_norm_model(true), blobs(96, Shape{6}), GetParam());
  expect_same_training(batch_norm_model(true, true), blobs(48, Shape{6, 6, 1}), GetParam());
}

// 98 rows in batches of 24: the last batch has 2 rows, so with 3 replicas one has none and
// contributes zero gradients. It still runs its layers on 0 rows, so that synchronized batch
// normalization finds every replica in its collectives (it failed with "mismatched sizes").
TEST_P(Mirrored, ABatchWithFewerRowsThanReplicasMatchesTheDefaultStrategy) {
  expect_same_training(dense_model, blobs(98, Shape{6}), GetParam());
  expect_same_training(batch_norm_model(true), blobs(98, Shape{6}), GetParam());
}

// Unsynchronized batch normalization with an empty replica: the moving statistics follow the
// replicas that had rows and stay mirrored.
TEST(MirroredStrategy, LocalBatchNormalizationWithAnEmptyReplicaStaysMirrored) {
  distribute::MirroredStrategy mirrored(3, 1);
  std::unique_ptr<Model> model;
  {
    auto scope = mirrored.scope();
    model = batch_norm_model(false)();
  }
  Data d = blobs(98, Shape{6});
  History h = model->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
  EXPECT_TRUE(std::isfinite(h["loss"].back()));
  auto primary = model->variables();
  for (int r = 1; r < 3; ++r) {
    auto mine = model->replica_variables(r);
    for (size_t i = 0; i < primary.size(); ++i) {
      EXPECT_EQ(mine[i]->value.to_vector(), primary[i]->value.to_vector()) << "replica " << r << " " << mine[i]->name;
      for (float v : primary[i]->value.to_vector()) EXPECT_TRUE(std::isfinite(v)) << primary[i]->name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, Mirrored, ::testing::Values(2, 3));

class CheckMirrored : public Callback {
 public:
  void on_batch_end(int64_t, const Logs&) override {
    auto primary = model->variables();
    for (int r = 1; r < replicas; ++r) {
      auto mine = model->replica_variables(r);
      for (size_t i = 0; i < primary.size(); ++i)
        identical = identical && mine[i]->value.to_vector() == primary[i]->value.to_vector();
    }
    ++checked;
  }
  int replicas = 0, checked = 0;
  bool identical = true;
};

TEST(MirroredStrategy, AllReduceDuringBackwardMatchesTheDefaultStrategy) {
  for (bool conv : {false, true}) {
    auto make = conv ? std::function<std::unique_ptr<Model>()>(conv_model)
                     : std::function<std::unique_ptr<Model>()>(dense_model);
    Data d = conv ? blobs(50, Shape{6, 6, 1}) : blobs(98, Shape{6});  // the last batch has 2 rows: 1 per replica
    auto reference = make();
    reference->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
    // 64-byte buckets: many all-reduces per step, issued while backward runs.
    distribute::MirroredStrategy mirrored({.num_replicas = 2, .threads_per_replica = 1, .bucket_bytes = 64});
    std::unique_ptr<Model> model;
    {
      auto scope = mirrored.scope();
      model = make();
    }
    model->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
    auto a = reference->variables(), b = model->variables(), mine = model->replica_variables(1);
    for (size_t i = 0; i < a.size(); ++i) {
      auto va = a[i]->value.to_vector();
      EXPECT_TRUE(testing::all_close(b[i]->value, std::vector<double>(va.begin(), va.end()), 1e-6, 1e-5)) << a[i]->name;
      EXPECT_EQ(mine[i]->value.to_vector(), b[i]->value.to_vector()) << a[i]->name;
    }
  }
}

// More replicas than cores time-share them, waiting without spinning, and still train as the
// default strategy does; absurd counts are refused naming the limit.
TEST(MirroredStrategy, MoreReplicasThanCoresTrainAsTheDefaultAndAbsurdCountsAreRefused) {
  expect_same_training(dense_model, blobs(98, Shape{6}), 16);
  for (int bad : {kMaxThreads + 1, 100000}) {
    try {
      distribute::MirroredStrategy s(bad);
      ADD_FAILURE() << bad << " replicas accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("from 1 to 1024"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(distribute::MirroredStrategy(2, kMaxThreads + 1), Error);
}

TEST(MirroredStrategy, VariablesAreIdenticalAfterEveryStep) {
  distribute::MirroredStrategy mirrored(3, 1);
  auto scope = mirrored.scope();
  auto model = dense_model();
  auto check = std::make_shared<CheckMirrored>();
  check->replicas = 3;
  Data d = blobs(90, Shape{6});
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 30, .callbacks = {check}, .verbose = 0});
  EXPECT_EQ(check->checked, 3);
  EXPECT_TRUE(check->identical);
}

TEST(MirroredStrategy, AFailingReplicaStopsTheStepWithOneError) {
  distribute::MirroredStrategy mirrored(2, 1);
  auto scope = mirrored.scope();
  auto model = dense_model();
  Data d = blobs(40, Shape{6});
  d.y.data<int32_t>()[30] = 9;  // a bad label in replica 1's shard of the first batch
  EXPECT_TRUE(testing::throws_error(
      [&] { model->fit(d.x, d.y, {.epochs = 1, .batch_size = 40, .shuffle = false, .verbose = 0}); },
      {"label 9", "out of range [0, 4)"}));
  // The strategy recovers for the next fit.
  d.y.data<int32_t>()[30] = 1;
  EXPECT_NO_THROW(model->fit(d.x, d.y, {.epochs = 1, .batch_size = 40, .verbose = 0}));
}

TEST(OneDeviceStrategy, TrainsExactlyAsTheDefault) {
  Data d = blobs(60, Shape{6});
  auto reference = dense_model();
  reference->fit(d.x, d.y, {.epochs = 2, .batch_size = 20, .verbose = 0});
  distribute::OneDeviceStrategy one;
  std::unique_ptr<Model> model;
  {
    auto scope = one.scope();
    model = dense_model();
  }
  EXPECT_EQ(model->strategy(), &one);
  EXPECT_EQ(one.num_replicas_in_sync(), 1);
  model->fit(d.x, d.y, {.epochs = 2, .batch_size = 20, .verbose = 0});
  for (size_t i = 0; i < model->variables().size(); ++i)
    EXPECT_EQ(model->variables()[i]->value.to_vector(), reference->variables()[i]->value.to_vector());
  EXPECT_EQ(distribute::current_strategy(), nullptr);  // the scope ended
}

TEST(MirroredStrategy, LocalBatchNormalizationKeepsTheMovingStatisticsMirrored) {
  distribute::MirroredStrategy mirrored(2, 1);
  auto scope = mirrored.scope();
  auto model = batch_norm_model(false)();
  auto check = std::make_shared<CheckMirrored>();
  check->replicas = 2;
  Data d = blobs(96, Shape{6});
  History h = model->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .callbacks = {check}, .verbose = 0});
  EXPECT_TRUE(check->identical);
  EXPECT_EQ(check->checked, 8);
  EXPECT_LT(h["loss"].back(), h["loss"].front());
  // The moving statistics moved (toward the replicas' average batch statistics).
  EXPECT_NE(model->variables()[4]->value.to_vector(), std::vector<float>(8, 0.0f));
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

using namespace layers;

// Deterministic mode: the same bits whatever the number of replicas, for the same global batch.
std::vector<std::vector<float>> train_deterministic(const std::function<std::unique_ptr<Model>()>& make, const Data& d,
                                                    distribute::MirroredOptions options, bool central = false) {
  options.deterministic = true;
  std::unique_ptr<distribute::Strategy> strategy;
  if (central) strategy = std::make_unique<distribute::CentralStorageStrategy>(options);
  else strategy = std::make_unique<distribute::MirroredStrategy>(options);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy->scope();
    model = make();
  }
  // 90 rows in batches of 24: the last batch has 18 rows, the micro-batches 2 or 3 rows each.
  model->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
  // A batch with fewer rows than micro-batches: some micro-batches are empty.
  model->fit(d.x.slice(0, 5), d.y.slice(0, 5), {.epochs = 1, .batch_size = 5, .verbose = 0});
  std::vector<std::vector<float>> out;
  for (Variable* v : model->variables()) out.push_back(v->value.to_vector());
  return out;
}

// Under Keras' mixed_bfloat16 policy (bf16 products where the CPU has them) deterministic mode
// keeps its promise: the same bits whatever the number of replicas. The second convolution reads
// 16 channels, so its products are bf16 too.
TEST(Deterministic, MixedBfloat16KeepsTheBitsWhateverTheNumberOfReplicas) {
  auto convs = [] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
    m->add(Conv2D(16, 3, {.padding = "same", .activation = "relu", .input_shape = Shape{6, 6, 3}}));
    m->add(Conv2D(8, 3, {.activation = "relu"}));
    m->add(Flatten());
    m->add(Dense(4, "softmax"));
    m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
    return m;
  };
  using Make = std::function<std::unique_ptr<Model>()>;
  for (auto [name, make, per_sample] : {std::tuple<std::string, Make, Shape>{"dense", dense_model, {6}},
                                        std::tuple<std::string, Make, Shape>{"convolutions", convs, {6, 6, 3}}}) {
    Data d = blobs(90, per_sample);
    auto plain = train_deterministic(make, d, {.num_replicas = 1, .threads_per_replica = 1});
    mixed_precision::set_global_policy("mixed_bfloat16");
    auto one = train_deterministic(make, d, {.num_replicas = 1, .threads_per_replica = 1});
    for (int replicas : {2, 3, 4})
      EXPECT_EQ(train_deterministic(make, d, {.num_replicas = replicas, .threads_per_replica = 1}), one)
          << name << ", " << replicas << " replicas";
    EXPECT_EQ(train_deterministic(make, d, {.num_replicas = 2}), one) << name << ", 2 replicas, default threads";
    mixed_precision::set_global_policy("float32");
    if (ops::has_bf16_products(Device::cpu())) EXPECT_NE(one, plain) << name << ": the policy changed no product";
  }
}

TEST(Deterministic, BitwiseIdenticalWhateverTheNumberOfReplicas) {
  using Make = std::function<std::unique_ptr<Model>()>;
  struct Case {
    std::string name;
    Make make;
    Shape per_sample;
    bool like_default;  // differs from non-deterministic training only in summation order
  };
  // Kernel gradients summed tile by tile from their products (ops::kernel_products_tile): 300 × 70
  // is two tiles, which two replicas sum apart, with 70 columns not a whole number of vectors.
  auto wide = [] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 5});
    m->add(Dense(70, "relu", {.input_shape = Shape{300}}));
    m->add(Dense(4, "softmax"));
    m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
    return m;
  };
  // Every layer that stacks the parts (Flatten, Activation, Dense without a bias), and activations
  // whose derivatives round.
  auto rowwise = [] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 7});
    m->add(Flatten({.input_shape = Shape{2, 3}}));
    m->add(Dense(12, "tanh"));
    m->add(Dense(12, "elu", {.use_bias = false}));
    m->add(Dropout(0.2f));
    m->add(Dense(8, "selu"));
    m->add(Dense(6, "sigmoid"));
    m->add(Dense(4));
    m->add(layers::Activation("softmax"));
    m->compile(optimizers::SGD(0.1f, {.momentum = 0.9f}), "sparse_categorical_crossentropy", {"accuracy"});
    return m;
  };
  for (const Case& c : {Case{"dense", dense_model, {6}, true}, Case{"wide dense", wide, {300}, true},
                        Case{"row-wise layers", rowwise, {2, 3}, true}, Case{"conv", conv_model, {6, 6, 1}, true},
                        Case{"synchronized batch norm", batch_norm_model(true), {6}, true},
                        Case{"synchronized batch norm after conv", batch_norm_model(true, true), {6, 6, 1}, true},
                        Case{"ghost batch norm", batch_norm_model(false), {6}, false}}) {
    Data d = blobs(90, c.per_sample);
    auto one = train_deterministic(c.make, d, {.num_replicas = 1, .threads_per_replica = 1});
    for (int replicas : {2, 3, 4, 8}) {
      auto got = train_deterministic(c.make, d, {.num_replicas = replicas, .threads_per_replica = 1});
      EXPECT_EQ(got, one) << c.name << ", " << replicas << " replicas";
    }
    EXPECT_EQ(train_deterministic(c.make, d, {.num_replicas = 2, .threads_per_replica = 1}, true), one)
        << c.name << ", central storage";
    // Deterministic mode runs one intra-op thread per replica unless told otherwise.
    EXPECT_EQ(train_deterministic(c.make, d, {.num_replicas = 1}), one) << c.name << ", 1 replica, default threads";
    auto reference = c.make();
    reference->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
    reference->fit(d.x.slice(0, 5), d.y.slice(0, 5), {.epochs = 1, .batch_size = 5, .verbose = 0});
    auto vars = reference->variables();
    for (size_t i = 0; i < vars.size(); ++i) {
      bool close = testing::all_close(vars[i]->value, std::vector<double>(one[i].begin(), one[i].end()), 1e-5, 1e-4);
      // Ghost batch norm normalizes each micro-batch with its own statistics: not what one device does.
      if (c.like_default) EXPECT_TRUE(close) << c.name << ": " << vars[i]->name;
      else if (vars[i]->name.find("moving") != std::string::npos)
        EXPECT_FALSE(close) << c.name << ": " << vars[i]->name;
    }
  }
}

// A model of layers that compute each row alone runs each replica's micro-batches as one batch
// (one forward a step per replica, not one per micro-batch), where the row-exact products are
// vectorised (AVX2 or AVX-512); a model with a convolution runs them one by one.
TEST(Deterministic, RowWiseModelsRunAReplicasPartsAsOneBatch) {
  if (!ops::has_fast_row_exact_products(Device::cpu()))
    GTEST_SKIP() << "this CPU has no AVX2 and FMA: deterministic steps run their micro-batches one by one";
  using Make = std::function<std::unique_ptr<Model>()>;
  for (auto [name, make, per_sample, forwards] :
       {std::tuple<std::string, Make, Shape, int64_t>{"dense", dense_model, {6}, 2 * 2},
        {"conv", conv_model, {6, 6, 1}, 2 * 8}}) {
    distribute::MirroredStrategy strategy({.num_replicas = 2, .threads_per_replica = 1, .deterministic = true});
    Timeline timeline;
    strategy.extended().set_timeline(&timeline);
    std::unique_ptr<Model> model;
    {
      auto scope = strategy.scope();
      model = make();
    }
    Data d = blobs(48, per_sample);
    model->fit(d.x, d.y, {.epochs = 1, .batch_size = 24, .verbose = 0});  // 2 steps
    EXPECT_EQ(timeline.totals()["forward"].count, forwards) << name;
  }
}

// A strategy's own split (StrategyExtended::split_batch): global batches of 24 in four parts, parts 0-1
// to replica 0 and 2-3 to replica 1 (each replica adds its two parts' gradients, then the
// all-reduce); or in five uneven parts, replica 0 computing none of them.
class SplitOfItsOwnExtended : public distribute::MirroredExtended {
 public:
  SplitOfItsOwnExtended(std::vector<int> first_part, int parts)
      : MirroredExtended({.num_replicas = 2, .threads_per_replica = 1}),
        first_part_(std::move(first_part)),
        parts_(parts) {}
  void split_batch(int64_t rows, distribute::BatchSplit& split) const override {
    split.even(rows, parts_, 2);
    split.first_part = first_part_;
  }

 private:
  std::vector<int> first_part_;
  int parts_;
};
struct SplitOfItsOwn : distribute::StrategyOf<SplitOfItsOwnExtended> {
  SplitOfItsOwn(std::vector<int> first_part, int parts)
      : StrategyOf(std::make_unique<SplitOfItsOwnExtended>(std::move(first_part), parts)) {}
};

TEST(StrategyHooks, ASplitOfItsOwnTrainsAsTheDefault) {
  Data d = blobs(96, Shape{6});
  for (auto [first_part, parts] : {std::pair{std::vector<int>{0, 2, 4}, 4}, std::pair{std::vector<int>{0, 0, 5}, 5}}) {
    auto reference = dense_model();
    History h0 = reference->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
    SplitOfItsOwn strategy(first_part, parts);
    std::unique_ptr<Model> model;
    {
      auto scope = strategy.scope();
      model = dense_model();
    }
    History h1 = model->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
    EXPECT_NEAR(h1["loss"].back(), h0["loss"].back(), 1e-5) << parts << " parts";
    EXPECT_NEAR(h1["accuracy"].back(), h0["accuracy"].back(), 1e-9) << parts << " parts";
    auto a = reference->variables(), b = model->variables();
    for (size_t i = 0; i < a.size(); ++i) {
      auto va = a[i]->value.to_vector();
      EXPECT_TRUE(testing::all_close(b[i]->value, std::vector<double>(va.begin(), va.end()), 1e-6, 1e-5))
          << a[i]->name << ", " << parts << " parts";
    }
  }
}

TEST(StrategyHooks, ASplitThatDoesNotCoverTheBatchIsNamed) {
  SplitOfItsOwn strategy({0, 2, 3}, 4);  // part 3 computed by nobody
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = dense_model();
  }
  Data d = blobs(48, Shape{6});
  EXPECT_TRUE(testing::throws_error([&] { model->fit(d.x, d.y, {.batch_size = 24, .verbose = 0}); },
                                    {"mirrored:2: split_batch cut a batch of 24 rows into 4 parts for 2 replicas"}));
}

TEST(Deterministic, NeedsAMicroBatchPerReplica) {
  EXPECT_TRUE(testing::throws_error(
      [] { distribute::MirroredStrategy s({.num_replicas = 4, .deterministic = true, .micro_batches = 2}); },
      {"micro_batches 2 < 4 replicas"}));
  distribute::MirroredStrategy s({.num_replicas = 2, .threads_per_replica = 1, .deterministic = true});
  EXPECT_EQ(s.name(), "mirrored:2:deterministic");
}

}  // namespace
}  // namespace tandem
