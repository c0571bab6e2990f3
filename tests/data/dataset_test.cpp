// The input pipeline: each stage against what it promises, determinism, errors, and fit on it.
#include <atomic>
#include <thread>

#include "tandem/data/dataset.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using data::Dataset;
using data::Element;

Dataset range(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return Dataset::from_tensor_slices({Tensor::from_vector({n}, v)});
}

std::vector<float> values(const Dataset& d, int epoch = 0) {
  std::vector<float> out;
  for (const Element& e : d.collect(epoch))
    for (float v : e[0].to_vector()) out.push_back(v);
  return out;
}

TEST(Dataset, SlicesAreViewsAndPair) {
  Tensor x = testing::random_tensor({5, 3}, 1);
  Tensor y = Tensor::from_vector({5}, std::vector<int32_t>{0, 1, 2, 3, 4});
  auto elements = Dataset::from_tensor_slices({x, y}).collect();
  ASSERT_EQ(elements.size(), 5u);
  EXPECT_EQ(elements[2][0].shape(), (Shape{3}));
  EXPECT_EQ(elements[2][0].data<float>(), x.data<float>() + 6);  // zero copy
  EXPECT_EQ(elements[4][1].data<int32_t>()[0], 4);
  EXPECT_TRUE(testing::throws_error(
      [&] {
        Dataset::from_tensor_slices({x, Tensor::zeros({4})});
      },
      {"component 1 has 4 rows, component 0 has 5"}));
}

TEST(Dataset, BatchTakeSkipRepeatShardAndCardinality) {
  EXPECT_EQ(values(range(7).batch(3)), (std::vector<float>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(range(7).batch(3).collect().back()[0].shape(), (Shape{1}));
  EXPECT_EQ(range(7).batch(3).cardinality(), 3);
  EXPECT_EQ(range(7).batch(3, true).cardinality(), 2);
  EXPECT_EQ(range(7).batch(3, true).collect().size(), 2u);
  EXPECT_EQ(values(range(10).skip(3).take(4)), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(values(range(3).repeat(2)), (std::vector<float>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(range(3).repeat().cardinality(), Dataset::kInfinite);
  EXPECT_EQ(values(range(3).repeat().take(7)), (std::vector<float>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(values(range(10).shard(3, 1)), (std::vector<float>{1, 4, 7}));
  EXPECT_EQ(range(10).shard(3, 1).cardinality(), 3);
  EXPECT_EQ(values(range(10).filter([](const Element& e) { return e[0].item() > 6; })), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(range(10).filter([](const Element&) { return true; }).cardinality(), Dataset::kUnknown);
  EXPECT_TRUE(testing::throws_error([] { range(3).batch(0); }, {"batch: size must be at least 1, got 0"}));
  EXPECT_TRUE(testing::throws_error([] { range(3).shard(2, 2); }, {"index 2 out of range [0, 2)"}));
  EXPECT_TRUE(testing::throws_error([] { range(3).repeat().collect(); }, {"infinite"}));
  EXPECT_TRUE(values(range(0).repeat().take(5)).empty());
}

TEST(Dataset, ShardsPartitionTheData) {
  std::vector<float> all;
  for (int k = 0; k < 4; ++k)
    for (float v : values(range(23).shard(4, k))) all.push_back(v);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, values(range(23)));
}

TEST(Dataset, ShuffleIsAPermutationDeterministicPerSeedAndEpoch) {
  Dataset s = range(50).shuffle(20, 7);
  std::vector<float> a = values(s, 0), b = values(s, 0), c = values(s, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, values(range(50)));
  std::vector<float> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, values(range(50)));
  EXPECT_EQ(values(range(50).shuffle(20, 7, false), 0), values(range(50).shuffle(20, 7, false), 3));
  EXPECT_NE(values(range(50).shuffle(20, 8)), a);
  // Repeated passes of a repeat() are reshuffled.
  std::vector<float> twice = values(range(10).shuffle(10, 1).repeat(2));
  EXPECT_NE(std::vector<float>(twice.begin(), twice.begin() + 10), std::vector<float>(twice.begin() + 10, twice.end()));
}

TEST(Dataset, ParallelMapKeepsOrderAndUsesThreads) {
  std::atomic<int> in_flight{0}, most{0};
  auto square = [&](Element e) {
    int now = ++in_flight;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --in_flight;
    return Element{ops::square(e[0])};
  };
  std::vector<float> out = values(range(40).map(square, 4));
  for (int i = 0; i < 40; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], static_cast<float>(i * i));
  EXPECT_GT(most.load(), 1);
  Dataset failing = range(10).map(
      [](Element e) -> Element {
        if (e[0].item() == 6) fail("map: element 6 is bad");
        return e;
      },
      3);
  EXPECT_TRUE(testing::throws_error([&] { failing.collect(); }, {"element 6 is bad"}));
}

TEST(Dataset, PrefetchDeliversEverythingAndForwardsErrors) {
  EXPECT_EQ(values(range(100).batch(7).prefetch(3)), values(range(100)));
  int calls = 0;
  Dataset gen = Dataset::from_generator([&calls] {
    ++calls;
    return Dataset::Generator([i = 0]() mutable -> std::optional<Element> {
      if (i == 5) fail("generator: broken record 5");
      return Element{Tensor::full({1}, static_cast<float>(i++))};
    });
  });
  auto it = gen.prefetch().iterate();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(it->next()->at(0).item(), static_cast<float>(i));
  EXPECT_TRUE(testing::throws_error([&] { it->next(); }, {"broken record 5"}));
  // An iterator dropped half-way stops its thread (no hang, no leak under the sanitizers).
  auto early = range(1000).prefetch(2).iterate();
  early->next();
}

TEST(Dataset, CacheRunsUpstreamOnceInMemoryAndInAFile) {
  testing::TempDir dir;
  int calls = 0;
  auto counted = [&](Element e) {
    ++calls;
    return e;
  };
  Dataset mem = range(6).map(counted).cache();
  EXPECT_EQ(values(mem), values(range(6)));
  EXPECT_EQ(values(mem), values(range(6)));
  EXPECT_EQ(calls, 6);
  calls = 0;
  Dataset file = range(6).map(counted).cache(dir.file("cache.safetensors"));
  values(file);
  Dataset again = range(6).map(counted).cache(dir.file("cache.safetensors"));  // as a later process would
  EXPECT_EQ(values(again), values(range(6)));
  EXPECT_EQ(calls, 6);
  // A pass abandoned half-way caches nothing.
  calls = 0;
  Dataset partial = range(6).map(counted).cache();
  partial.iterate()->next();
  values(partial);
  EXPECT_EQ(calls, 7);
}

TEST(Dataset, BatchRejectsMismatchedElements) {
  Dataset gen = Dataset::from_generator([] {
    return Dataset::Generator([i = 0]() mutable -> std::optional<Element> {
      if (i == 3) return std::nullopt;
      return Element{Tensor::zeros({i++ == 2 ? int64_t{4} : int64_t{3}})};
    });
  });
  EXPECT_TRUE(testing::throws_error([&] { gen.batch(3).collect(); },
                                    {"component 0 of element 2 is float32 (4,)", "element 0 has float32 (3,)"}));
}

TEST(Dataset, FitOnAPipelineEqualsFitOnTensors) {
  using namespace layers;
  Tensor x = testing::random_tensor({64, 5}, 2);
  std::vector<int32_t> l(64);
  for (int i = 0; i < 64; ++i) l[static_cast<size_t>(i)] = i % 3;
  Tensor y = Tensor::from_vector({64}, std::span<const int32_t>(l));
  auto make = [] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 4});
    m->add(Dense(8, "relu", {.input_shape = Shape{5}}));
    m->add(Dense(3, "softmax"));
    m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
    return m;
  };
  auto a = make(), b = make();
  History ha = a->fit(x, y, {.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0});
  History hb = b->fit(Dataset::from_tensor_slices({x, y}).batch(16).prefetch(), {.epochs = 2, .verbose = 0});
  EXPECT_EQ(ha["loss"], hb["loss"]);
  for (size_t i = 0; i < a->variables().size(); ++i)
    EXPECT_EQ(a->variables()[i]->value.to_vector(), b->variables()[i]->value.to_vector());
  // A model that learns its input shape from the first batch trains the same.
  Sequential unbuilt(SequentialOptions{.seed = 4});
  unbuilt.add(Dense(8, "relu"));
  unbuilt.add(Dense(3, "softmax"));
  unbuilt.compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  EXPECT_EQ(unbuilt.fit(Dataset::from_tensor_slices({x, y}).batch(16), {.epochs = 2, .verbose = 0})["loss"],
            ha["loss"]);
  for (size_t i = 0; i < a->variables().size(); ++i)
    EXPECT_EQ(a->variables()[i]->value.to_vector(), unbuilt.variables()[i]->value.to_vector());
  History hc = make()->fit(Dataset::from_tensor_slices({x, y}).filter([](const Element&) { return true; }).batch(16),
                           {.epochs = 1, .verbose = 0});
  EXPECT_EQ(hc["loss"].size(), 1u);
  EXPECT_TRUE(testing::throws_error([&] { make()->fit(Dataset::from_tensor_slices({x}).batch(16), {.verbose = 0}); },
                                    {"(x, y) or (x, y, sample_weight) batches, got 1 component"}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        make()->fit(Dataset::from_tensor_slices({x, y}), {.verbose = 0});
      },
      {"x has shape (5,)", "batch the dataset"}));
}

// evaluate and predict read a pipeline as their arrays; steps_per_epoch runs one iterator on
// across epochs and stops, warning, when it runs out; predict on zero rows is empty.
TEST(Dataset, EvaluatePredictAndStepsPerEpochOnAPipeline) {
  using namespace layers;
  Tensor x = testing::random_tensor({48, 5}, 3);
  std::vector<int32_t> l(48);
  for (int i = 0; i < 48; ++i) l[static_cast<size_t>(i)] = i % 3;
  Tensor y = Tensor::from_vector({48}, std::span<const int32_t>(l));
  auto make = [] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 5});
    m->add(Dense(6, "relu", {.input_shape = Shape{5}}));
    m->add(Dense(3, "softmax"));
    m->compile(optimizers::SGD(0.1), "sparse_categorical_crossentropy", {"accuracy"});
    return m;
  };
  auto a = make();
  Dataset batches = Dataset::from_tensor_slices({x, y}).batch(16);
  EXPECT_EQ(a->evaluate(batches), a->evaluate(x, y, {.batch_size = 16}));
  EXPECT_EQ(a->predict(batches).to_vector(), a->predict(x).to_vector());
  EXPECT_EQ(a->predict(Dataset::from_tensor_slices({x}).batch(20)).to_vector(), a->predict(x).to_vector());
  EXPECT_EQ(a->predict(x.slice(0, 0)).shape(), (Shape{0, 3}));
  EXPECT_EQ(a->evaluate(batches, 1), a->evaluate(x.slice(0, 16), y.slice(0, 16), {.batch_size = 16}));

  // 3 epochs of 2 steps over an endless pipeline: its batches 0..5, i.e. the data twice.
  auto endless = make(), ref = make();
  History h = endless->fit(batches.repeat(), {.epochs = 3, .steps_per_epoch = 2, .verbose = 0});
  EXPECT_EQ(h["loss"].size(), 3u);
  ref->fit(batches.repeat(2), {.epochs = 1, .verbose = 0});
  for (size_t i = 0; i < ref->variables().size(); ++i)
    EXPECT_EQ(ref->variables()[i]->value.to_vector(), endless->variables()[i]->value.to_vector());
  // 3 batches, epochs of 2 (Keras 3's iterator): the second epoch ends short after one batch, the
  // third starts a new pass; the same as training on batches 0, 1 | 2 | 0, 1 | 2.
  auto short_epochs = make(), ref_short = make();
  EXPECT_EQ(short_epochs->fit(batches, {.epochs = 4, .steps_per_epoch = 2, .verbose = 0})["loss"].size(), 4u);
  ref_short->fit(batches.repeat(2), {.epochs = 1, .verbose = 0});
  for (size_t i = 0; i < ref_short->variables().size(); ++i)
    EXPECT_EQ(ref_short->variables()[i]->value.to_vector(), short_epochs->variables()[i]->value.to_vector());
  // Exactly steps_per_epoch == the batches of a pass: a new pass at every epoch's start.
  EXPECT_EQ(make()->fit(batches, {.epochs = 3, .steps_per_epoch = 3, .verbose = 0})["loss"].size(), 3u);
  EXPECT_TRUE(testing::throws_error([&] { make()->fit(batches.take(0), {.steps_per_epoch = 2, .verbose = 0}); },
                                    {"the dataset gave no batches in epoch 1"}));
  EXPECT_TRUE(testing::throws_error([&] { make()->fit(batches.repeat(), {.verbose = 0}); }, {"pass steps_per_epoch"}));
  EXPECT_TRUE(testing::throws_error([&] { make()->fit(x, y, {.steps_per_epoch = 2, .verbose = 0}); },
                                    {"steps_per_epoch applies to a Dataset"}));
  FitOptions with_val{.epochs = 1, .verbose = 0};
  with_val.validation_dataset = batches;
  EXPECT_EQ(make()->fit(batches, with_val)["val_loss"], make()->fit(x, y,
                                                                    {.epochs = 1,
                                                                     .batch_size = 16,
                                                                     .validation_data = std::pair{x, y},
                                                                     .shuffle = false,
                                                                     .verbose = 0})["val_loss"]);
}

}  // namespace
}  // namespace tandem
