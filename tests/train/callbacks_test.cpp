// The Keras callbacks: checkpoints, backups, CSV, early stopping, learning-rate control, NaN.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

struct Data {
  Tensor x, y;
};
Data data(int64_t n = 60) {
  Tensor x = testing::random_tensor({n, 4}, 3);
  std::vector<int32_t> l(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) l[static_cast<size_t>(i)] = x.data<float>()[i * 4] > 0 ? 1 : 0;
  return {x, Tensor::from_vector({n}, std::span<const int32_t>(l))};
}

std::unique_ptr<Model> small_model(float lr = 0.1f, bool dropout = true) {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
  m->add(Dense(8, "relu", {.input_shape = Shape{4}}));
  if (dropout) m->add(Dropout(0.25f));
  m->add(Dense(2, "softmax"));
  m->compile(optimizers::Adam(lr), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}

std::vector<std::vector<float>> weights(Model& m) {
  std::vector<std::vector<float>> w;
  for (auto& [name, t] : m.state()) w.push_back(t.astype(DType::Float32).to_vector());
  return w;
}

TEST(ModelCheckpoint, PatternsBestOnlyAndLatest) {
  testing::TempDir dir;
  Data d = data();
  auto m = small_model();
  auto every = std::make_shared<ModelCheckpoint>(dir.file("all/ckpt_{epoch:02d}_{loss:.3f}"));
  auto best = std::make_shared<ModelCheckpoint>(
      dir.file("best/w"),
      ModelCheckpointOptions{.monitor = "val_accuracy", .save_best_only = true, .save_weights_only = true});
  m->fit(d.x, d.y, {.epochs = 3, .batch_size = 10, .validation_split = 0.2, .callbacks = {every, best}, .verbose = 0});
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.file("all"))) n += e.path().extension() == ".safetensors";
  EXPECT_EQ(n, 3);
  EXPECT_TRUE(every->last_saved().find("ckpt_03_") != std::string::npos) << every->last_saved();
  EXPECT_EQ(latest_checkpoint(dir.file("all")), every->last_saved());
  EXPECT_TRUE(std::filesystem::exists(dir.file("best/w.safetensors")));
  EXPECT_EQ(latest_checkpoint(dir.file("nothing")), "");
  auto other = small_model();
  other->load_checkpoint(every->last_saved());
  EXPECT_EQ(weights(*other), weights(*m));
  EXPECT_EQ(other->position().epoch, 3);
  EXPECT_TRUE(testing::throws_error([&] { other->load_checkpoint(dir.file("best/w.safetensors")); },
                                    {"no \"seed\"", "not a checkpoint"}));
  EXPECT_TRUE(testing::throws_error([] { ModelCheckpoint("x_{epoch:q}"); }, {"bad format"}));
}

// Stops training (as a kill would) right after a given global step.
class StopAfter : public Callback {
 public:
  explicit StopAfter(int64_t steps) : steps_(steps) {}
  void on_batch_end(int64_t, const Logs&) override {
    if (++seen_ == steps_) throw std::runtime_error("simulated crash");
  }

 private:
  int64_t steps_, seen_ = 0;
};

TEST(BackupAndRestore, ResumedRunEndsWithTheSameWeightsBitwise) {
  testing::TempDir dir;
  Data d = data(100);
  FitOptions base{.epochs = 4, .batch_size = 8, .verbose = 0};
  auto reference = small_model();
  reference->fit(d.x, d.y, base);

  auto crashed = small_model();
  FitOptions first = base;
  first.callbacks = {std::make_shared<BackupAndRestore>(dir.path(), BackupAndRestoreOptions{.save_freq = 5}),
                     std::make_shared<StopAfter>(23)};  // mid epoch 2 (13 steps per epoch); last backup at step 20
  EXPECT_THROW(crashed->fit(d.x, d.y, first), std::runtime_error);
  ASSERT_TRUE(std::filesystem::exists(dir.file("backup.safetensors")));

  auto resumed = small_model();  // a fresh process: the same program, weights yet untrained
  for (Variable* v : resumed->variables()) v->value.fill(0.5f);
  FitOptions second = base;
  second.callbacks = {std::make_shared<BackupAndRestore>(dir.path(), BackupAndRestoreOptions{.save_freq = 5})};
  resumed->fit(d.x, d.y, second);
  EXPECT_EQ(weights(*resumed), weights(*reference));
  EXPECT_FALSE(std::filesystem::exists(dir.file("backup.safetensors")));  // removed after success
}

// Issue 11, item 3: a backup resumes only the run that wrote it. Another global batch size,
// optimizer or seed is refused naming each difference (before, it resumed at a batch the new
// epoch does not have); a kill's temporary file is cleaned up.
TEST(BackupAndRestore, ABackupOfAnotherRunIsRefusedNamingEachDifference) {
  testing::TempDir dir;
  Data d = data(100);
  auto crashed = small_model();
  FitOptions first{.epochs = 4, .batch_size = 8, .verbose = 0};
  first.callbacks = {std::make_shared<BackupAndRestore>(dir.path(), BackupAndRestoreOptions{.save_freq = 5}),
                     std::make_shared<StopAfter>(23)};
  EXPECT_THROW(crashed->fit(d.x, d.y, first), std::runtime_error);
  ASSERT_TRUE(std::filesystem::exists(dir.file("backup.safetensors")));
  std::ofstream(dir.file("backup.safetensors.tmp-99999")) << "half a file";

  auto other = std::make_unique<Sequential>(SequentialOptions{.seed = 7});
  other->add(Dense(8, "relu", {.input_shape = Shape{4}}));
  other->add(Dropout(0.25f));
  other->add(Dense(2, "softmax"));
  other->compile(optimizers::SGD(0.1f), "sparse_categorical_crossentropy", {"accuracy"});
  FitOptions second{.epochs = 4, .batch_size = 16, .verbose = 0};
  second.callbacks = {std::make_shared<BackupAndRestore>(dir.path(), BackupAndRestoreOptions{.save_freq = 5})};
  EXPECT_TRUE(
      testing::throws_error([&] { other->fit(d.x, d.y, second); },
                            {"is of another run, so it is not resumed", "batch_size: \"8\" in the backup, \"16\" now",
                             "optimizer: \"Adam (learning rate 0.1)\" in the backup, \"SGD (learning rate 0.1)\" now",
                             "seed: \"9\" in the backup, \"7\" now", "To start this run fresh, remove"}));
  EXPECT_FALSE(std::filesystem::exists(dir.file("backup.safetensors.tmp-99999")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("backup.safetensors"))) << "the other run's backup is kept";

  // The same run under another precision (bf16 products) is another run too.
  auto mixed = small_model();
  mixed->layers()[0]->set_dtype_policy("mixed_bfloat16");
  FitOptions third = first;
  third.callbacks = {std::make_shared<BackupAndRestore>(dir.path(), BackupAndRestoreOptions{.save_freq = 5})};
  EXPECT_TRUE(testing::throws_error([&] { mixed->fit(d.x, d.y, third); },
                                    {"is of another run, so it is not resumed", "architecture: \"Dense Dropout",
                                     "\" in the backup, \"Dense(mixed_bfloat16) Dropout"}));

  // The run that wrote it, started again: resumed to the end.
  auto same = small_model();
  FitOptions again = first;
  again.callbacks = {std::make_shared<BackupAndRestore>(dir.path(), BackupAndRestoreOptions{.save_freq = 5})};
  same->fit(d.x, d.y, again);
  EXPECT_EQ(same->position().epoch, 4);
}

TEST(CSVLogger, OneRowPerEpoch) {
  testing::TempDir dir;
  Data d = data();
  auto m = small_model();
  m->fit(
      d.x, d.y,
      {.epochs = 2, .batch_size = 20, .callbacks = {std::make_shared<CSVLogger>(dir.file("log.csv"))}, .verbose = 0});
  std::ifstream in(dir.file("log.csv"));
  std::string header, row1, row2, extra;
  std::getline(in, header);
  std::getline(in, row1);
  std::getline(in, row2);
  EXPECT_EQ(header, "epoch,loss,accuracy,lr");
  EXPECT_EQ(row1.substr(0, 2), "0,");
  EXPECT_EQ(row2.substr(0, 2), "1,");
  EXPECT_FALSE(std::getline(in, extra));
}

TEST(EarlyStopping, StopsAfterPatienceAndRestoresBest) {
  Data d = data();
  auto m = small_model(1e-9f, false);  // a learning rate too small for the loss to improve
  auto stop =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "loss", .min_delta = 0.01, .patience = 2});
  History h = m->fit(d.x, d.y, {.epochs = 20, .batch_size = 20, .callbacks = {stop}, .verbose = 0});
  EXPECT_EQ(h["loss"].size(), 3u);  // epoch 0 sets the best; epochs 1 and 2 bring nothing: stop
  EXPECT_EQ(stop->stopped_epoch(), 2);
}

TEST(LearningRate, SchedulerAndPlateau) {
  Data d = data();
  auto m = small_model();
  auto sched =
      std::make_shared<LearningRateScheduler>([](int epoch, float lr) { return epoch == 0 ? 0.05f : lr * 0.5f; });
  History h = m->fit(d.x, d.y, {.epochs = 3, .batch_size = 20, .callbacks = {sched}, .verbose = 0});
  EXPECT_FLOAT_EQ(static_cast<float>(h["lr"][0]), 0.05f);
  EXPECT_FLOAT_EQ(static_cast<float>(h["lr"][2]), 0.0125f);
  auto plateau = small_model(1e-9f, false);
  auto reduce = std::make_shared<ReduceLROnPlateau>(
      ReduceLROnPlateauOptions{.monitor = "loss", .factor = 0.5, .patience = 1, .min_delta = 0.01});
  History p = plateau->fit(d.x, d.y, {.epochs = 4, .batch_size = 20, .callbacks = {reduce}, .verbose = 0});
  // Reduced at the end of epochs 1, 2 and 3; an epoch logs the rate it trained with.
  EXPECT_NEAR(p["lr"].back(), 1e-9 * 0.25, 1e-13);
  EXPECT_NEAR(plateau->optimizer().current_learning_rate(), 1e-9 * 0.125, 1e-13);
  EXPECT_TRUE(testing::throws_error([] { ReduceLROnPlateau({.factor = 2.0}); }, {"factor must be in (0, 1), got 2"}));
}

TEST(TerminateOnNaN, StopsAtTheFirstBadBatch) {
  Data d = data();
  d.x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  auto m = small_model();
  History h = m->fit(d.x, d.y,
                     {.epochs = 5,
                      .batch_size = 60,
                      .shuffle = false,
                      .callbacks = {std::make_shared<TerminateOnNaN>()},
                      .verbose = 0});
  EXPECT_EQ(h["loss"].size(), 1u);
}

// Writes NaN into a weight after batch `batch` of epoch `epoch` (0-based), as a diverging update
// would, and counts the batches of each epoch.
class PoisonWeights : public Callback {
 public:
  PoisonWeights(int epoch, int64_t batch) : epoch_(epoch), batch_(batch) {}
  void on_epoch_begin(int epoch, const Logs&) override { current_ = epoch; }
  void on_batch_end(int64_t batch, const Logs&) override {
    ++batches[current_];
    if (current_ == epoch_ && batch == batch_)
      model->variables()[0]->value.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  }
  std::map<int, int64_t> batches;

 private:
  int epoch_, current_ = 0;
  int64_t batch_;
};

// Issue 11, item 4: fit stops at the first non-finite loss, not at the end of its epoch, says so
// once, and no checkpoint or backup of non-finite weights replaces the last good one.
TEST(TerminateOnNaN, StopsMidEpochAndKeepsTheLastGoodCheckpoint) {
  testing::TempDir dir;
  Data d = data(60);
  auto m = small_model(0.01f);
  auto poison = std::make_shared<PoisonWeights>(1, 2);
  auto guard = std::make_shared<TerminateOnNaN>();
  auto checkpoints = std::make_shared<ModelCheckpoint>(dir.file("ckpt-{epoch:02d}"));
  auto backup = std::make_shared<BackupAndRestore>(dir.file("backup"), BackupAndRestoreOptions{.save_freq = 1});
  History h =
      m->fit(d.x, d.y, {.epochs = 4, .batch_size = 6, .callbacks = {poison, checkpoints, backup, guard}, .verbose = 0});
  ASSERT_TRUE(guard->terminated());
  EXPECT_EQ(guard->where().substr(0, 16), "epoch 2, batch 4");
  EXPECT_EQ(poison->batches[0], 10);
  EXPECT_EQ(poison->batches[1], 4) << "fit went on after the first non-finite loss";
  EXPECT_EQ(poison->batches.count(2), 0u);
  EXPECT_EQ(latest_checkpoint(dir.path()), dir.file("ckpt-01.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ckpt-02.safetensors")));
  ASSERT_TRUE(std::filesystem::exists(dir.file("backup/backup.safetensors")))
      << "the diverged run's backup was deleted";
  auto restored = small_model(0.01f);
  restored->load_checkpoint(dir.file("backup/backup.safetensors"));
  for (const auto& w : weights(*restored))
    for (float v : w) ASSERT_TRUE(std::isfinite(v)) << "a backup of non-finite weights";
}

}  // namespace
}  // namespace tandem
