// Functional models of several outputs: the outputs packed side by side (pack_inputs' layout) and
// their targets likewise; a loss per output (or one for all), weighted and summed per sample as
// the ops compute it by hand; each output's loss and metrics reported under its name; training
// under mirrored replicas and a pipeline as on one device; Keras files with the loss list.
#include <gtest/gtest.h>

#include "tandem/graph.h"
#include "tandem/model.h"
#include "tandem/model_json.h"
#include "test_util.h"
#include "train/under_strategy.h"

namespace tandem {
namespace {

using namespace layers;

// A trunk, then a classifier head "kind" (3 classes, softmax) and a regression head "size" (2).
std::unique_ptr<Model> two_heads(uint64_t seed = 4) {
  SymbolicTensor x = Input({5}, "features");
  SymbolicTensor h = Dense(8, "relu")(x);
  SymbolicTensor kind = Dense(3, "softmax", {.name = "kind"})(h);
  SymbolicTensor size = Dense(2, "linear", {.name = "size"})(Dense(4, "tanh")(h));
  return std::make_unique<Functional>(std::vector{x}, std::vector{kind, size}, ModelOptions{.seed = seed});
}

Loss two_losses() { return Loss::outputs({"sparse_categorical_crossentropy", "mse"}, {1.0f, 0.5f}); }

// 24 rows: features, class labels, two regression targets; the targets packed (labels, then size).
struct Data {
  Tensor x, labels, size, y;
};
Data data() {
  Data d{testing::random_tensor({24, 5}, 1),
         testing::labelled_rows(24, 1, 3, 2).y,
         testing::random_tensor({24, 2}, 3),
         {}};
  d.y = pack_inputs(std::vector{d.labels.astype(DType::Float32).reshape({24, 1}), d.size});
  return d;
}

TEST(MultiOutput, TheLossIsEachOutputsWeightedAndTheOutputsComePacked) {
  auto model = two_heads();
  EXPECT_EQ(model->output_names(), (std::vector<std::string>{"kind", "size"}));
  EXPECT_EQ(model->output_shape(), (Shape{5}));
  model->compile(optimizers::SGD(0.1f), two_losses(), {"accuracy"});
  Data d = data();
  Tensor packed = model->predict(d.x);
  ASSERT_EQ(packed.shape(), (Shape{24, 5}));
  Tensor kind = ops::columns(packed, 0, 3), size = ops::columns(packed, 3, 5);
  Tensor by_hand = ops::add(ops::sparse_softmax_cross_entropy(ops::log(kind), d.labels),
                            ops::scale(ops::mean_squared_error(size, d.size), 0.5f));
  Tensor per_sample = model->loss().per_sample(d.y, packed);
  std::vector<float> a = per_sample.to_vector(), b = by_hand.to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * std::max(1.0f, std::fabs(b[i])));
  Logs logs = model->evaluate(d.x, d.y, {.batch_size = 24});
  std::vector<std::string> names;
  for (const auto& [name, value] : logs) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "kind_loss", "size_loss", "kind_accuracy", "size_accuracy"}));
  EXPECT_NEAR(logs[0].second, logs[1].second + 0.5 * logs[2].second, 1e-5);
  History h = model->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  EXPECT_EQ(h["size_loss"].size(), 2u);
  EXPECT_LT(h["loss"][1], h["loss"][0]);
}

TEST(MultiOutput, StrategiesTrainItAsOneDevice) {
  Data d = data();
  auto trained = [&](const std::string& strategy) {
    auto run = testing::made_under(strategy, [] {
      auto m = two_heads();
      m->compile(optimizers::SGD(0.1f), two_losses());
      return m;
    });
    run.model->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
    return testing::weights_of(*run.model);
  };
  auto one = trained("default");
  for (const char* name : {"mirrored:2", "pipeline:2:1", "ps-sync:1x1:threads"}) {
    auto many = trained(name);
    ASSERT_EQ(many.size(), one.size()) << name;
    for (size_t i = 0; i < one.size(); ++i)
      for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(many[i][j], one[i][j], 2e-5) << name << " " << i;
  }
}

TEST(MultiOutput, OneLossServesEveryOutputAndMistakesAreNamed) {
  SymbolicTensor x = Input({4});
  SymbolicTensor a = Dense(2, "linear", {.name = "a"})(x), b = Dense(3, "linear", {.name = "b"})(x);
  Functional model({x}, {a, b});
  model.compile(optimizers::SGD(0.1f), "mse");
  ASSERT_NE(model.loss().parts(), nullptr);
  EXPECT_EQ(model.loss().parts()->size(), 2u);
  EXPECT_EQ((*model.loss().parts())[1].target_column, 2);
  EXPECT_NE(testing::error_of([&] {
              model.fit(testing::random_tensor({4, 4}, 1), testing::random_tensor({4, 4}, 2), {.verbose = 0});
            }).find("the targets of 2 outputs go packed as (rows, 5) (a: 2 columns, b: 3 columns), got (4, 4)"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              model.compile(optimizers::SGD(0.1f), Loss::outputs({"mse", "mse", "mse"}));
            }).find("3 losses for a model of 2 outputs (a, b)"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              Loss::outputs({"mse", "mse"}, {1.0f});
            }).find("1 weights for 2 losses"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { Functional({x}, {a, a}); }).find("two outputs come from \"a\""), std::string::npos);
}

TEST(MultiOutput, KerasFilesKeepTheOutputsAndTheLossList) {
  testing::TempDir dir;
  auto model = two_heads();
  model->compile(optimizers::Adam(0.01f), two_losses(), {"accuracy"});
  Data d = data();
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 8, .verbose = 0});
  model->save(dir.file("heads.keras"));
  auto back = load_model(dir.file("heads.keras"));
  EXPECT_EQ(back->output_names(), model->output_names());
  EXPECT_EQ(back->loss().name(), "[sparse_categorical_crossentropy, mean_squared_error]");
  EXPECT_EQ((*back->loss().parts())[1].weight, 0.5f);
  EXPECT_EQ(back->predict(d.x).to_vector(), model->predict(d.x).to_vector());
  EXPECT_EQ(model_from_json(model->to_json(), {.seed = 4})->to_json(), model->to_json());
}

}  // namespace
}  // namespace tandem
