// Keras' gradient clipping and decoupled weight decay, on every optimizer: hand-computed updates
// (clip_by_norm, clip_by_global_norm, clip_by_value, then weight decay, then the update), the
// same result whatever the replica count, and the strategies that cannot take a norm refusing it
// by name. torch.optim.AdamW and clip_grad_norm_ are the Python tests' (tests/python/test_optimizers.py).
#include <cmath>

#include "test_util.h"
#include "train/under_strategy.h"

namespace tandem {
namespace {

using namespace layers;

// One SGD step (lr 1, no momentum: w' = w - g') of `gradients` on zeros, so the update is -g'.
std::vector<std::vector<float>> step(const GradientClipping& clipping, const std::vector<std::vector<float>>& grads,
                                     float weight_decay = 0.0f) {
  std::vector<Variable> vars;
  std::vector<Tensor> gradients;
  for (size_t i = 0; i < grads.size(); ++i) {
    auto n = static_cast<int64_t>(grads[i].size());
    vars.push_back(Variable{fmt::format("v{}", i), Tensor::zeros({n})});
    gradients.push_back(Tensor::from_vector({n}, std::span<const float>(grads[i])));
  }
  optimizers::SGD sgd(1.0f);
  sgd.set_clipping(clipping);
  sgd.set_weight_decay(weight_decay);
  std::vector<Variable*> pointers;
  for (Variable& v : vars) pointers.push_back(&v);
  sgd.apply_here(pointers, gradients);
  std::vector<std::vector<float>> out;
  for (Variable& v : vars) {
    std::vector<float> w = v.value.to_vector();
    for (float& x : w) x = -x;  // the applied gradient
    out.push_back(w);
  }
  return out;
}

void expect_near(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (size_t j = 0; j < got[i].size(); ++j) EXPECT_NEAR(got[i][j], want[i][j], 1e-6) << i << "," << j;
  }
}

TEST(Clipping, ClipnormScalesEachGradientToItsNormAlone) {
  // ‖(3, 4)‖ = 5 > 1: times 1/5; ‖(0.3, 0.4)‖ = 0.5 ≤ 1: as it is.
  expect_near(step({.clipnorm = 1.0f}, {{3, 4}, {0.3f, 0.4f}}), {{0.6f, 0.8f}, {0.3f, 0.4f}});
}

TEST(Clipping, GlobalClipnormScalesEveryGradientByOneFactor) {
  // ‖(3, 0, 0, 4)‖ = 5 > 2: every gradient times 2/5.
  expect_near(step({.global_clipnorm = 2.0f}, {{3, 0}, {0, 4}}), {{1.2f, 0.0f}, {0.0f, 1.6f}});
  expect_near(step({.global_clipnorm = 10.0f}, {{3, 0}, {0, 4}}), {{3, 0}, {0, 4}});
}

TEST(Clipping, ClipvalueCutsEachElementAfterTheNorm) {
  expect_near(step({.clipvalue = 0.5f}, {{3, -4, 0.1f}}), {{0.5f, -0.5f, 0.1f}});
  // By norm first ((3, 4) to (0.6, 0.8)), then by value.
  expect_near(step({.clipnorm = 1.0f, .clipvalue = 0.7f}, {{3, 4}}), {{0.6f, 0.7f}});
}

TEST(Clipping, WeightDecayShrinksTheVariableBeforeItsUpdate) {
  // w = 2, g = 1, lr 0.1, weight_decay 0.5: 2 · (1 - 0.05) - 0.1 · 1 = 1.8.
  Variable w{"w", Tensor::full({1}, 2.0f)};
  optimizers::SGD sgd(0.1f);
  sgd.set_weight_decay(0.5f);
  std::vector<Variable*> vars{&w};
  std::vector<Tensor> grads{Tensor::full({1}, 1.0f)};
  sgd.apply_here(vars, grads);
  EXPECT_NEAR(w.value.to_vector()[0], 1.8f, 1e-6);
  optimizers::AdamW adamw;
  EXPECT_EQ(adamw.name(), "AdamW");
  EXPECT_FLOAT_EQ(adamw.weight_decay(), 0.004f);
  EXPECT_EQ(optimizers::by_name("AdamW")->name(), "AdamW");
}

TEST(Clipping, BadValuesAreRefusedByName) {
  optimizers::Adam adam;
  EXPECT_NE(testing::error_of([&] {
              adam.set_clipping({.clipnorm = 1.0f, .global_clipnorm = 1.0f});
            }).find("Adam: clipnorm (1) and global_clipnorm (1) cannot both be set"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              adam.set_clipping({.clipvalue = -1.0f});
            }).find("Adam: clipvalue must be a positive number (or 0: no clipping), got -1"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { adam.set_clipping({.clipnorm = NAN}); }).find("clipnorm must be a positive"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              adam.set_weight_decay(-0.1f);
            }).find("Adam: weight_decay must be a non-negative number, got -0.1"),
            std::string::npos);
}

// Keras' label smoothing: categorical targets y·(1 - s) + s / classes, binary y·(1 - s) + s / 2.
TEST(LabelSmoothing, TargetsAreSmoothedAsKerasDoes) {
  std::vector<float> p{0.2f, 0.7f, 0.1f}, y{0, 1, 0};
  Tensor probs = Tensor::from_vector({1, 3}, std::span<const float>(p)),
         onehot = Tensor::from_vector({1, 3}, std::span<const float>(y));
  float got = Loss::categorical_crossentropy(false, 0.3f).per_sample(onehot, probs).to_vector()[0];
  EXPECT_NEAR(got, -(0.1 * std::log(0.2) + 0.8 * std::log(0.7) + 0.1 * std::log(0.1)), 1e-6);
  std::vector<float> pb{0.8f}, yb{1.0f};
  got = Loss::binary_crossentropy(false, 0.2f)
            .per_sample(Tensor::from_vector({1, 1}, std::span<const float>(yb)),
                        Tensor::from_vector({1, 1}, std::span<const float>(pb)))
            .to_vector()[0];
  EXPECT_NEAR(got, -(0.9 * std::log(0.8) + 0.1 * std::log(0.2)), 1e-6);
  EXPECT_NE(testing::error_of([] {
              Loss(Loss::Kind::SparseCategoricalCrossentropy, false, 0.1f);
            }).find("sparse_categorical_crossentropy: label_smoothing applies to categorical_crossentropy"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              Loss::categorical_crossentropy(false, -0.5f);
            }).find("label_smoothing must be in [0, 1], got -0.5"),
            std::string::npos);
}

std::vector<std::vector<float>> train(const std::string& strategy_name, GradientClipping clipping, float decay = 0) {
  testing::LabelledRows d = testing::labelled_rows(48, 5, 3, 3);
  testing::UnderStrategy run = testing::made_under(strategy_name, [&] {
    auto model = testing::small_classifier();
    optimizers::SGD sgd(0.5f);
    sgd.set_clipping(clipping);
    sgd.set_weight_decay(decay);
    model->compile(sgd, "sparse_categorical_crossentropy");
    return model;
  });
  run.model->fit(d.x, d.y, {.epochs = 2, .batch_size = 16, .verbose = 0});
  return testing::weights_of(*run.model);
}

// Clipping acts on the step's combined gradients: two or three replicas clip as one device does.
TEST(Clipping, TheResultDoesNotDependOnTheReplicaCount) {
  for (GradientClipping c : {GradientClipping{.clipnorm = 0.05f}, GradientClipping{.global_clipnorm = 0.05f},
                             GradientClipping{.clipvalue = 0.01f}}) {
    auto one = train("default", c, 0.01f), unclipped = train("default", {}, 0.01f);
    EXPECT_NE(one, unclipped) << "the clipping changed nothing: the test's norms are too large";
    for (const char* name : {"mirrored:2", "mirrored:3", "central:2"}) {
      auto many = train(name, c, 0.01f);
      for (size_t i = 0; i < one.size(); ++i)
        for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(many[i][j], one[i][j], 1e-5) << name << " " << i;
    }
  }
}

// Where an update sees pieces of variables or a share of them, the norms it cannot take are refused.
TEST(Clipping, StrategiesThatUpdatePiecesRefuseTheNormsTheyCannotTake) {
  std::string error = testing::error_of([] { train("model-parallel:2", {.clipnorm = 1.0f}); });
  EXPECT_NE(error.find("clipnorm needs each variable's whole gradient"), std::string::npos) << error;
  error = testing::error_of([] { train("pipeline:2", {.global_clipnorm = 1.0f}); });
  EXPECT_NE(error.find("global_clipnorm needs every gradient of the step in one place, and PipelineStrategy"),
            std::string::npos)
      << error;
  EXPECT_EQ(testing::error_of([] { train("pipeline:2", {.clipnorm = 1.0f}); }), "(no error)")
      << "a stage holds whole variables";
  error = testing::error_of([] { train("ps-sync:2x2:threads", {.global_clipnorm = 1.0f}); });
  EXPECT_NE(error.find("global_clipnorm needs every gradient of the step in one place"), std::string::npos) << error;
  EXPECT_EQ(testing::error_of([] { train("ps-sync:1x2:threads", {.global_clipnorm = 1.0f}); }), "(no error)");
}

}  // namespace
}  // namespace tandem
