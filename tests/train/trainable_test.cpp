// Keras' `trainable`: a frozen layer keeps its variables in training (no gradient, no update, no
// optimizer slot), its batch normalization runs in inference mode, and the rest trains. Fine-tuning
// (train, freeze the base, train the head) under the default, mirrored, central-storage and
// parameter-server strategies; the multi-worker case is tests/distribute/multi_worker_test.cpp's.
#include "test_util.h"
#include "train/under_strategy.h"

namespace tandem {
namespace {

using namespace layers;

std::unique_ptr<Model> base_and_head() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 5});
  m->add(Dense(8, "relu", {.input_shape = Shape{6}}));
  m->add(BatchNormalization({.momentum = 0.9f}));
  m->add(Dense(4, "softmax"));
  m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}

// Pretrained (where the strategy trains batch normalization: not on parameter servers), then its
// base (Dense and BatchNormalization) frozen and the head trained under the strategy: the base's
// six variables keep their bits, the head's two train, and the optimizer keeps slots for the head
// alone.
void fine_tune(const std::string& strategy_name, bool pretrain = true) {
  SCOPED_TRACE(strategy_name);
  testing::LabelledRows d = testing::labelled_rows(48, 6, 4, 7);
  testing::UnderStrategy run = testing::made_under(strategy_name, base_and_head);
  std::unique_ptr<Model>& model = run.model;
  if (pretrain) model->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .verbose = 0});  // everything trains
  auto pretrained = testing::weights_of(*model);
  model->layers()[0]->set_trainable(false);
  model->layers()[1]->set_trainable(false);
  EXPECT_EQ(model->trainable_variables().size(), 2u);
  model->fit(d.x, d.y, {.epochs = 2, .batch_size = 16, .verbose = 0});
  auto tuned = testing::weights_of(*model);
  auto vars = model->variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    if (i < 6) EXPECT_EQ(tuned[i], pretrained[i]) << vars[i]->name << " of the frozen base changed";
    else EXPECT_NE(tuned[i], pretrained[i]) << vars[i]->name << " of the head did not train";
  }
  std::vector<std::string> slots;
  for (auto& [name, tensor] : model->optimizer().state()) slots.push_back(name);
  EXPECT_EQ(slots, (std::vector<std::string>{"optimizer/iterations", "optimizer/dense_1/kernel/m",
                                             "optimizer/dense_1/kernel/v", "optimizer/dense_1/bias/m",
                                             "optimizer/dense_1/bias/v"}));
}

TEST(Trainable, AFrozenBaseKeepsItsBitsWhileTheHeadTrainsUnderTheDefaultStrategy) { fine_tune("default"); }
TEST(Trainable, AFrozenBaseKeepsItsBitsWhileTheHeadTrainsUnderMirrored) { fine_tune("mirrored:2"); }
TEST(Trainable, AFrozenBaseKeepsItsBitsWhileTheHeadTrainsUnderCentralStorage) { fine_tune("central:2"); }
TEST(Trainable, AFrozenBaseKeepsItsBitsWhileTheHeadTrainsOnParameterServers) {
  fine_tune("ps-sync:1x2:threads", false);
  fine_tune("ps-async:2x2:threads", false);
}

// The head's Adam slots outlive the freezing: training the head after freezing the base goes on
// from the moments pretraining made (a fresh optimizer state would be another run).
TEST(Trainable, TheSlotsOfVariablesStillTrainingAreKeptWhenOthersFreeze) {
  testing::LabelledRows d = testing::labelled_rows(32, 6, 4, 7);
  auto model = base_and_head();
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .verbose = 0});
  Tensor m_before;
  for (auto& [name, t] : model->optimizer().state())
    if (name == "optimizer/dense_1/kernel/m") m_before = t;
  ASSERT_TRUE(m_before.defined());
  model->layers()[0]->set_trainable(false);
  model->optimizer().build(model->trainable_variables());
  for (auto& [name, t] : model->optimizer().state())
    if (name == "optimizer/dense_1/kernel/m") EXPECT_EQ(t.to_vector(), m_before.to_vector());
}

// Frozen at construction (before the layer is built), in the summary's counts, and unfrozen again.
TEST(Trainable, AFrozenLayerIsCountedNonTrainableAndCanBeUnfrozen) {
  auto model = std::make_unique<Sequential>(SequentialOptions{.seed = 5});
  Dense base(8, "relu", {.input_shape = Shape{6}});
  base.set_trainable(false);
  model->add(base);
  model->add(Dense(4, "softmax"));
  model->compile(optimizers::SGD(0.1f), "sparse_categorical_crossentropy");
  std::string summary = model->summary();
  EXPECT_NE(summary.find("Trainable params: 36"), std::string::npos) << summary;
  EXPECT_NE(summary.find("Non-trainable params: 56"), std::string::npos) << summary;
  EXPECT_FALSE(model->layers()[0]->trainable());
  model->set_trainable(true);
  EXPECT_EQ(model->trainable_variables().size(), 4u);
  model->set_trainable(false);
  EXPECT_EQ(model->trainable_variables().size(), 0u);
  for (Variable* v : model->variables()) EXPECT_TRUE(v->frozen && v->learns) << v->name;
}

// A frozen batch normalization normalizes with its moving statistics (Keras' inference mode) in
// training too, so a batch's own statistics do not move its output or its moving averages.
TEST(Trainable, AFrozenBatchNormalizationRunsInInferenceMode) {
  BatchNormalization bn({.momentum = 0.5f});
  bn.build(Shape{3}, 1);
  bn.set_trainable(false);
  Tensor x = testing::random_tensor({5, 3}, 2, 2.0f, 4.0f);
  Tensor training = bn.call(x, CallContext{.training = true}), inference = bn.call(x, CallContext{.training = false});
  EXPECT_EQ(training.to_vector(), inference.to_vector());
  EXPECT_EQ(bn.variables()[2].value.to_vector(), std::vector<float>(3, 0.0f)) << "the moving mean moved";
}

}  // namespace
}  // namespace tandem
