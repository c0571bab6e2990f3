// Keras' sample weights: each row's loss times its weight and a batch's loss Σ weight·loss ÷ its
// rows (SUM_OVER_BATCH_SIZE), from sample_weight, class_weight, a dataset's third component and
// validation_data's; evaluate likewise. Hand-computed values, the same result under the
// strategies, and bad weights refused by name and row.
#include "tandem/data/dataset.h"
#include "test_util.h"
#include "train/under_strategy.h"

namespace tandem {
namespace {

using namespace layers;

Tensor values(std::vector<float> v, Shape shape) { return Tensor::from_vector(shape, std::span<const float>(v)); }

std::unique_ptr<Model> ones_model() {
  auto model = std::make_unique<Sequential>();
  model->add(Dense(1, "", {.use_bias = false, .kernel_initializer = "ones", .input_shape = Shape{2}}));
  model->compile(optimizers::SGD(0.1f), "mse");
  return model;
}

// x = (1, 2), (0, 1); y = 0, 0; weights 2 and 0.5. Predictions 3 and 1: losses 9 and 1, weighted 18
// and 0.5, the batch's loss (18 + 0.5) ÷ 2 = 9.25. Gradient mean(w·2·p·x) = ((12, 24) + (0, 1)) ÷ 2
// = (6, 12.5), so w' = (1, 1) - 0.1·(6, 12.5) = (0.4, -0.25).
TEST(SampleWeight, EachRowsLossIsTimesItsWeightOverTheBatchsRows) {
  auto model = ones_model();
  Tensor x = values({1, 2, 0, 1}, {2, 2}), y = values({0, 0}, {2, 1}), w = values({2, 0.5f}, {2});
  History h = model->fit(x, y, {.epochs = 1, .batch_size = 2, .verbose = 0, .sample_weight = w});
  EXPECT_NEAR(h["loss"][0], 9.25, 1e-5);
  std::vector<float> k = model->variables()[0]->value.to_vector();
  EXPECT_NEAR(k[0], 0.4f, 1e-6);
  EXPECT_NEAR(k[1], -0.25f, 1e-6);
  // evaluate at (0.4, -0.25): predictions -0.1 and -0.25, losses 0.01 and 0.0625; weighted
  // (0.02 + 0.03125) ÷ 2 = 0.025625; unweighted 0.03625.
  EXPECT_NEAR(model->evaluate(x, y, {.sample_weight = w})[0].second, 0.025625, 1e-7);
  EXPECT_NEAR(model->evaluate(x, y)[0].second, 0.03625, 1e-7);
  // validation_data's weights weigh val_loss the same way.
  auto again = ones_model();
  h = again->fit(x, y,
                 {.epochs = 1,
                  .batch_size = 2,
                  .validation_data = std::pair{x, y},
                  .verbose = 0,
                  .sample_weight = w,
                  .validation_sample_weight = w});
  EXPECT_NEAR(h["val_loss"][0], 0.025625, 1e-7);
}

testing::LabelledRows data() { return testing::labelled_rows(48, 5, 3, 3); }

Tensor weights_by_class(const Tensor& labels, std::vector<float> per_class) {
  std::vector<float> w;
  const int32_t* c = labels.contiguous().data<int32_t>();
  for (int64_t i = 0; i < labels.dim(0); ++i) w.push_back(per_class[static_cast<size_t>(c[i])]);
  return Tensor::from_vector({labels.dim(0)}, std::span<const float>(w));
}

std::pair<std::vector<std::vector<float>>, double> train(const std::string& strategy_name, FitOptions options) {
  SCOPED_TRACE(strategy_name);
  testing::LabelledRows d = data();
  testing::UnderStrategy run = testing::made_under(strategy_name, [] {
    auto model = testing::small_classifier();
    model->compile(optimizers::SGD(0.5f), "sparse_categorical_crossentropy");
    return model;
  });
  options.epochs = 2;
  options.batch_size = 16;
  options.verbose = 0;
  History h = run.model->fit(d.x, d.y, options);
  return {testing::weights_of(*run.model), h["loss"].back()};
}

// class_weight is the sample weight of each row's class; with sample_weight too, their product.
TEST(SampleWeight, ClassWeightIsEachRowsClassWeight) {
  testing::LabelledRows d = data();
  auto [by_class, loss] = train("default", {.class_weight = {{0, 2.0f}, {1, 0.5f}, {2, 1.0f}}});
  auto [by_row, row_loss] = train("default", {.sample_weight = weights_by_class(d.y, {2.0f, 0.5f, 1.0f})});
  EXPECT_EQ(by_class, by_row);
  EXPECT_EQ(loss, row_loss);
  auto [plain, plain_loss] = train("default", {});
  EXPECT_NE(by_class, plain) << "the weights changed nothing";
  auto [both, both_loss] = train("default", {.sample_weight = weights_by_class(d.y, {1.0f, 2.0f, 3.0f}),
                                             .class_weight = {{0, 2.0f}, {1, 0.5f}, {2, 1.0f}}});
  auto [product, product_loss] = train("default", {.sample_weight = weights_by_class(d.y, {2.0f, 1.0f, 3.0f})});
  EXPECT_EQ(both, product);
}

// Keras weighs validation rows by their sample weights alone: class_weight is for training.
TEST(SampleWeight, ValidationRowsAreNotClassWeighted) {
  testing::LabelledRows d = data();
  testing::UnderStrategy run = testing::made_under("default", [] {
    auto model = testing::small_classifier();
    model->compile(optimizers::SGD(0.5f), "sparse_categorical_crossentropy");
    return model;
  });
  History h = run.model->fit(d.x, d.y,
                             {.epochs = 1,
                              .batch_size = 16,
                              .validation_split = 0.25,
                              .verbose = 0,
                              .class_weight = {{0, 5.0f}, {1, 0.1f}, {2, 1.0f}}});
  Tensor x_val = d.x.slice(36, 48), y_val = d.y.slice(36, 48);
  EXPECT_NEAR(h["val_loss"][0], run.model->evaluate(x_val, y_val)[0].second, 1e-6);
}

// A target of one column is its class rounded, as Keras 3: 0.9999999 is class 1.
TEST(SampleWeight, AOneColumnTargetsClassIsRounded) {
  auto model = ones_model();
  Tensor x = values({1, 2, 0, 1}, {2, 2}), y = values({0.9999999f, 0.0f}, {2, 1});
  History h = model->fit(x, y, {.epochs = 1, .batch_size = 2, .verbose = 0, .class_weight = {{0, 0.0f}, {1, 2.0f}}});
  // Row 0 (class 1, weight 2): (3 - 0.9999999)² · 2 ÷ 2 rows; row 1 weighs 0.
  EXPECT_NEAR(h["loss"][0], (3 - 0.9999999) * (3 - 0.9999999) * 2 / 2, 1e-4);
}

TEST(SampleWeight, TheStrategiesTrainAsOneDevice) {
  FitOptions weighted{.sample_weight = weights_by_class(data().y, {2.0f, 0.5f, 0.0f})};
  auto [one, one_loss] = train("default", weighted);
  for (const char* name : {"mirrored:2", "mirrored:3", "central:2", "ps-sync:1x1:threads", "ps-sync:2x1:threads",
                           "pipeline:2", "model-parallel:2"}) {
    auto [many, many_loss] = train(name, weighted);
    EXPECT_NEAR(many_loss, one_loss, 1e-5) << name;
    for (size_t i = 0; i < one.size(); ++i)
      for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(many[i][j], one[i][j], 1e-5) << name << " " << i;
  }
}

// A dataset's third component is its rows' weights, as arrays' sample_weight.
TEST(SampleWeight, ADatasetsThirdComponentWeighsItsRows) {
  auto model = ones_model();
  Tensor x = values({1, 2, 0, 1}, {2, 2}), y = values({0, 0}, {2, 1}), w = values({2, 0.5f}, {2});
  History h = model->fit(data::Dataset::from_tensor_slices({x, y, w}).batch(2), {.verbose = 0});
  EXPECT_NEAR(h["loss"][0], 9.25, 1e-5);
  EXPECT_NEAR(model->variables()[0]->value.to_vector()[1], -0.25f, 1e-6);
  EXPECT_NEAR(model->evaluate(data::Dataset::from_tensor_slices({x, y, w}).batch(2))[0].second, 0.025625, 1e-7);
}

TEST(SampleWeight, BadWeightsAreRefusedByNameAndRow) {
  auto model = ones_model();
  Tensor x = values({1, 2, 0, 1, 3, 3}, {3, 2}), y = values({0, 0, 1}, {3, 1});
  std::string error = testing::error_of([&] {
    model->fit(x, y, {.verbose = 0, .sample_weight = values({1, 2}, {2})});
  });
  EXPECT_NE(error.find("fit: sample_weight has shape (2,), expected one weight per sample: (3) or (3, 1)"),
            std::string::npos)
      << error;
  error = testing::error_of([&] { model->fit(x, y, {.verbose = 0, .sample_weight = values({1, NAN, 2}, {3})}); });
  EXPECT_NE(error.find("fit: sample_weight at row 1 is nan, not a finite number"), std::string::npos) << error;
  error = testing::error_of([&] { model->fit(x, y, {.verbose = 0, .class_weight = {{0, 1.0f}}}); });
  EXPECT_NE(error.find("fit: class_weight has no weight for class 1 (row 2)"), std::string::npos) << error;
  error = testing::error_of([&] { model->evaluate(x, y, {.sample_weight = values({1, 1, 1, 1}, {4})}); });
  EXPECT_NE(error.find("evaluate: sample_weight has shape (4,)"), std::string::npos) << error;
  error = testing::error_of([&] { model->fit(x, y, {.verbose = 0, .validation_sample_weight = values({1}, {1})}); });
  EXPECT_NE(error.find("validation_sample_weight is given without validation_data"), std::string::npos) << error;
  EXPECT_EQ(model->variables()[0]->value.to_vector(), (std::vector<float>{1, 1})) << "a refused fit trained";
}

}  // namespace
}  // namespace tandem
