// Keras' regularizers: l1·Σ|w| + l2·Σw² on kernels and biases, and on each output row
// (activity, ÷ the batch's rows); fit adds them to its loss and trains on them, evaluate reports
// them, a custom loop's optimizer leaves them to the loop (model.losses). Hand-computed values,
// the same result under the strategies, refusals by name, and Keras' model files.
#include <cmath>

#include "tandem/model_json.h"
#include "test_util.h"
#include "train/under_strategy.h"

namespace tandem {
namespace {

using namespace layers;

Tensor values(std::vector<float> v, Shape shape) { return Tensor::from_vector(shape, std::span<const float>(v)); }

TEST(Regularizers, PenaltiesAndTheirGradientsAreKerasFormulas) {
  Tensor w = values({1, -2, 0}, {3});
  Regularizer r{.l1 = 0.1f, .l2 = 0.2f};
  EXPECT_NEAR(ops::penalty(w, r).item(), 0.1 * 3 + 0.2 * 5, 1e-6);
  EXPECT_EQ(ops::penalty_gradient(w, r).to_vector(), (std::vector<float>{0.1f + 0.4f, -0.1f - 0.8f, 0.0f}));
  // The tape's gradient of the penalty (abs's sign(x), 0 at 0) is penalty_gradient's.
  Tensor x = values({1, -2, 0}, {3});
  GradientTape tape;
  tape.watch(x);
  Tensor p = ops::penalty(x, r);
  std::vector<Tensor> g = tape.gradient(p, std::span<const Tensor>(&x, 1));
  EXPECT_EQ(g[0].to_vector(), ops::penalty_gradient(w, r).to_vector());
  // Each row's penalty: (1, -2) and (0, 3).
  EXPECT_EQ(ops::row_penalties(values({1, -2, 0, 3}, {2, 2}), r).to_vector(),
            (std::vector<float>{0.1f * 3 + 0.2f * 5, 0.1f * 3 + 0.2f * 9}));
}

// x = (1, 2), (0, 1); y = 0, 0; a Dense(1) with a kernel of ones, no bias; mean squared error; SGD(0.1).
// Predictions 3 and 1: losses 9 and 1, mean 5. Activity l2 0.5: 4.5 and 0.5, mean 2.5. Kernel l2
// 0.25: 0.25 · 2 = 0.5. The loss fit reports: 8.
// Gradients: data mean(2·p·x) = (3, 7); activity mean(2·0.5·p·x) = (1.5, 3.5); kernel 2·0.25·w =
// (0.5, 0.5): (5, 11), so w' = (1, 1) - 0.1·(5, 11) = (0.5, -0.1).
std::unique_ptr<Model> regularized(Regularizer kernel, Regularizer activity) {
  auto model = std::make_unique<Sequential>();
  model->add(Dense(1, "", {.use_bias = false, .kernel_initializer = "ones", .input_shape = Shape{2}}));
  model->layers()[0]->set_regularizers({.kernel = kernel, .activity = activity});
  model->compile(optimizers::SGD(0.1f), "mse");
  return model;
}

TEST(Regularizers, FitTrainsOnThePenaltiesAndReportsThemInItsLoss) {
  auto model = regularized({.l2 = 0.25f}, {.l2 = 0.5f});
  Tensor x = values({1, 2, 0, 1}, {2, 2}), y = values({0, 0}, {2, 1});
  History h = model->fit(x, y, {.epochs = 1, .batch_size = 2, .verbose = 0});
  EXPECT_NEAR(h["loss"][0], 8.0, 1e-5);
  std::vector<float> w = model->variables()[0]->value.to_vector();
  EXPECT_NEAR(w[0], 0.5f, 1e-6);
  EXPECT_NEAR(w[1], -0.1f, 1e-6);
  // evaluate at w = (0.5, -0.1): predictions 0.3 and -0.1, losses 0.09 and 0.01 (mean 0.05),
  // activity 0.045 and 0.005 (mean 0.025), kernel 0.25 · 0.26 = 0.065: 0.14.
  EXPECT_NEAR(model->evaluate(x, y, {.verbose = 0})[0].second, 0.14, 1e-6);
  // Without the regularizers the same step gives (1, 1) - 0.1·(3, 7) and reports 5.
  auto plain = regularized({}, {});
  EXPECT_NEAR(plain->fit(x, y, {.epochs = 1, .batch_size = 2, .verbose = 0})["loss"][0], 5.0, 1e-5);
  EXPECT_NEAR(plain->variables()[0]->value.to_vector()[1], 0.3f, 1e-6);
}

// A custom loop adds model.losses itself: apply_gradients outside fit adds nothing, and model.losses
// holds the kernel's penalty and the last call's activity penalty (÷ its rows).
TEST(Regularizers, ACustomLoopGetsThemFromLossesAndTheOptimizerAddsNothing) {
  auto model = regularized({.l2 = 0.25f}, {.l2 = 0.5f});
  Tensor x = values({1, 2, 0, 1}, {2, 2});
  GradientTape tape;
  Tensor out = (*model)(x, true);
  std::vector<Tensor> losses = model->losses();
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_NEAR(losses[0].item(), 0.5f, 1e-6);
  EXPECT_NEAR(losses[1].item(), 2.5f, 1e-6);
  std::vector<Tensor> g = tape.gradient(losses[0], model->trainable_variables());
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{0.5f, 0.5f}));
  std::vector<Tensor> zero{Tensor::zeros({2, 1})};
  model->optimizer().apply(model->trainable_variables(), zero);
  EXPECT_EQ(model->variables()[0]->value.to_vector(), (std::vector<float>{1, 1}));
}

std::pair<std::vector<std::vector<float>>, double> train(const std::string& strategy_name, bool activity = true) {
  SCOPED_TRACE(strategy_name);
  testing::LabelledRows d = testing::labelled_rows(48, 5, 3, 3);
  testing::UnderStrategy run = testing::made_under(strategy_name, [&] {
    auto model = testing::small_classifier();
    model->layers()[0]->set_regularizers(
        {.kernel = {.l1 = 0.01f, .l2 = 0.02f}, .bias = {.l2 = 0.05f}, .activity = {.l1 = activity ? 0.03f : 0.0f}});
    model->layers()[1]->set_regularizers({.kernel = {.l2 = 0.1f}});
    model->compile(optimizers::SGD(0.5f), "sparse_categorical_crossentropy");
    return model;
  });
  History h = run.model->fit(d.x, d.y, {.epochs = 2, .batch_size = 16, .verbose = 0});
  return {testing::weights_of(*run.model), h["loss"].back()};
}

void expect_same(const std::string& strategy_name, bool activity = true) {
  auto [one, one_loss] = train("default", activity);
  auto [many, many_loss] = train(strategy_name, activity);
  EXPECT_NEAR(many_loss, one_loss, 1e-5) << strategy_name;
  ASSERT_EQ(many.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i)
    for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(many[i][j], one[i][j], 1e-5) << strategy_name << " " << i;
}

TEST(Regularizers, TheStrategiesTrainAsOneDevice) {
  auto [plain, loss] = train("default", false);
  for (const char* name : {"mirrored:2", "mirrored:3", "central:2", "ps-sync:1x1:threads", "ps-sync:2x1:threads"})
    expect_same(name);
  for (const char* name : {"pipeline:2", "model-parallel:2"}) expect_same(name, false);
}

// Synchronous parameter servers with a backup worker: an update sums two of the three workers'
// pushes, each its rows' share of the penalties, so an update adds them once. With inputs of zeros
// the data gives no gradient: each update multiplies the kernel by exactly (1 - lr · 2 · l2).
TEST(Regularizers, AnUpdateOfSeveralPushesAddsThePenaltiesOnce) {
  Tensor x = Tensor::zeros({96, 2}), y = Tensor::zeros({96, 1});
  testing::UnderStrategy run = testing::made_under("ps-sync:1x3:1:threads", [] {
    auto model = std::make_unique<Sequential>();
    model->add(Dense(1, "", {.use_bias = false, .kernel_initializer = "ones", .input_shape = Shape{2}}));
    model->layers()[0]->set_regularizers({.kernel = {.l2 = 0.5f}});
    model->compile(optimizers::SGD(0.1f), "mse");
    return model;
  });
  History h = run.model->fit(x, y, {.epochs = 1, .batch_size = 16, .verbose = 0});
  int64_t updates = run.model->optimizer().iterations();
  ASSERT_GT(updates, 0);
  float want = std::pow(1.0f - 0.1f * 2 * 0.5f, static_cast<float>(updates));
  for (float w : run.model->variables()[0]->value.to_vector()) EXPECT_NEAR(w, want, 1e-6) << updates << " updates";
  EXPECT_GT(h["loss"][0], 0.0) << "the reported loss holds the penalty";
}

// The optimizer's copies (a replica's, a shard's) follow fit's switch, which a custom loop after
// fit turns off: a copy kept from fit would add the penalties' gradients twice.
TEST(Regularizers, TheOptimizersCopiesFollowTheSwitch) {
  optimizers::Adam adam;
  std::unique_ptr<Optimizer> copy = adam.clone();
  adam.set_regularizes(true);
  EXPECT_TRUE(copy->regularizes());
  adam.set_regularizes(false);
  EXPECT_FALSE(copy->regularizes());
}

TEST(Regularizers, AStepThatCannotTakeAnActivityPenaltyRefusesIt) {
  std::string error = testing::error_of([] { train("pipeline:2"); });
  EXPECT_NE(error.find("Dense \"dense\": activity_regularizer: this strategy's step does not add"), std::string::npos)
      << error;
  error = testing::error_of([] { train("model-parallel:2"); });
  EXPECT_NE(error.find("activity_regularizer is not supported on a Dense layer split over devices"), std::string::npos)
      << error;
}

TEST(Regularizers, BadOnesAreRefusedByName) {
  Dense no_bias(2, "", {.use_bias = false, .input_shape = Shape{3}});
  no_bias.build(Shape{3}, 1);
  std::string error = testing::error_of([&] { no_bias.set_regularizers({.bias = {.l2 = 0.1f}}); });
  EXPECT_NE(error.find("bias_regularizer is given, but the layer has no bias (it was made with use_bias=False)"),
            std::string::npos)
      << error;
  EXPECT_FALSE(no_bias.regularizers().bias.any()) << "a refused regularizer stayed on the layer";
  error = testing::error_of([&] { no_bias.set_regularizers({.kernel = {.l1 = -1.0f}}); });
  EXPECT_NE(error.find("kernel_regularizer needs finite, non-negative l1 and l2, got l1=-1 l2=0"), std::string::npos)
      << error;
  Flatten flatten;
  flatten.set_regularizers({.kernel = {.l2 = 0.1f}});
  error = testing::error_of([&] { flatten.build(Shape{2, 2}, 1); });
  EXPECT_NE(error.find("kernel_regularizer is given, but the layer has no kernel"), std::string::npos) << error;
  EXPECT_FALSE(flatten.built()) << "a layer that refused its regularizers counts as built";
}

TEST(Regularizers, KerasModelFilesKeepThem) {
  auto model = regularized({.l1 = 0.25f, .l2 = 0.5f}, {.l2 = 0.125f});
  std::unique_ptr<Model> back = model_from_json(model->to_json());
  const Layer::Regularizers& r = back->layers()[0]->regularizers();
  EXPECT_EQ(r.kernel.l1, 0.25f);
  EXPECT_EQ(r.kernel.l2, 0.5f);
  EXPECT_EQ(r.activity.l2, 0.125f);
  EXPECT_FALSE(r.bias.any());
  // Keras 3's form, and its names.
  std::string keras3 = R"({"class_name": "Sequential", "config": {"layers": [
    {"class_name": "InputLayer", "config": {"batch_shape": [null, 4]}},
    {"class_name": "Dense", "config": {"units": 2, "kernel_regularizer": {"module": "keras.regularizers",
      "class_name": "L1L2", "config": {"l1": 0.0, "l2": 0.01}, "registered_name": null},
      "bias_regularizer": "l1", "activity_regularizer": null}}]}})";
  back = model_from_json(keras3);
  EXPECT_EQ(back->layers()[0]->regularizers().kernel.l2, 0.01f);
  EXPECT_EQ(back->layers()[0]->regularizers().kernel.l1, 0.0f);
  EXPECT_EQ(back->layers()[0]->regularizers().bias.l1, 0.01f);
  std::string other = keras3;
  other.replace(other.find("L1L2"), 4, "OrthogonalRegularizer");
  std::string error = testing::error_of([&] { model_from_json(other); });
  EXPECT_NE(error.find("\"kernel_regularizer\" is {"), std::string::npos) << error;
  EXPECT_NE(error.find("Tandem implements the regularizers L1, L2 and L1L2"), std::string::npos) << error;
  // On a layer without a kernel, a kernel_regularizer stays refused.
  std::string flatten = R"({"layers": [{"class_name": "Flatten", "config": {"batch_input_shape": [null, 2, 2],
      "kernel_regularizer": {"class_name": "L2", "config": {"l2": 0.1}}}}]})";
  error = testing::error_of([&] { model_from_json(flatten); });
  EXPECT_NE(error.find("\"kernel_regularizer\""), std::string::npos) << error;
}

}  // namespace
}  // namespace tandem
