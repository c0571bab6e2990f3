// ModelParallelStrategy and its pieces: the differentiable group collectives against finite
// differences, mlp5 split 2 and 3 ways (3 does not divide 160) against one device after 20 steps
// of Adam with dropout, in fit and in a custom loop; whole checkpoints both ways; the memory limit.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "distribute/split_models.h"
#include "tandem/collectives/communicator.h"
#include "tandem/distribute/model_parallel.h"
#include "tandem/distribute/strategy_registry.h"
#include "tandem/model.h"
#include "tandem/timeline.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;
using distribute::Communicator;
using testing::Data;
using testing::data;
using testing::expect_close;
using testing::mlp5;

// --- the collectives: each rank's input gradient against the finite difference of the loss ---
//
// As in a split layer: an input is either replicated (the same tensor on every rank: a change
// moves every rank's copy) or each rank's own; an output is either replicated (the loss counts it
// once) or each rank's own (the loss sums over the ranks). The loss is Σ <w_r, out_r> (w the same
// on every rank for a replicated output, counted once).
struct Form {
  bool replicated_input, replicated_output;
};

double loss_of(int ranks, const std::function<Tensor(const Tensor&, Communicator&)>& op, Form form,
               const std::vector<Tensor>& x, const std::vector<Tensor>& w, std::vector<Tensor>* grads) {
  auto comms = distribute::make_in_process_communicators(ranks);
  std::vector<double> parts(static_cast<size_t>(ranks));
  if (grads != nullptr) grads->assign(static_cast<size_t>(ranks), Tensor());
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Tensor input = x[static_cast<size_t>(r)].clone();
      mark_trainable(input);
      GradientTape tape;
      Tensor out = op(input, *comms[static_cast<size_t>(r)]);
      Tensor dot = ops::sum(ops::mul(out, w[static_cast<size_t>(r)]));
      parts[static_cast<size_t>(r)] = dot.item();
      if (grads != nullptr) (*grads)[static_cast<size_t>(r)] = tape.gradient(dot, std::vector<Tensor>{input})[0];
    });
  for (auto& t : threads) t.join();
  if (form.replicated_output) return parts[0];
  double sum = 0;
  for (double p : parts) sum += p;
  return sum;
}

void check_gradient(const char* what, int ranks, const std::function<Tensor(const Tensor&, Communicator&)>& op,
                    Form form, const std::vector<Shape>& in, const std::vector<Shape>& out) {
  std::vector<Tensor> x, w, grads;
  for (int r = 0; r < ranks; ++r) {
    x.push_back(testing::random_tensor(in[static_cast<size_t>(r)], form.replicated_input ? 10 : 10 + r));
    w.push_back(testing::random_tensor(out[static_cast<size_t>(r)], form.replicated_output ? 20 : 20 + r));
  }
  loss_of(ranks, op, form, x, w, &grads);
  const float h = 1e-2f;
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < x[static_cast<size_t>(r)].numel(); ++i) {
      auto moved = [&](float by) {
        std::vector<Tensor> y;
        for (int q = 0; q < ranks; ++q) {
          y.push_back(x[static_cast<size_t>(q)].clone());
          if (q == r || form.replicated_input) y.back().data<float>()[i] += by;
        }
        return loss_of(ranks, op, form, y, w, nullptr);
      };
      double numeric = (moved(h) - moved(-h)) / (2 * h);
      EXPECT_NEAR(grads[static_cast<size_t>(r)].data<float>()[i], numeric, 1e-3)
          << what << ": rank " << r << " element " << i;
    }
}

TEST(GroupCollectives, GradientsMatchFiniteDifferences) {
  std::vector<int64_t> widths{3, 2, 2};  // uneven, as 7 over 3 ranks
  std::vector<Shape> whole(3, Shape{2, 7}), sliced{{2, 3}, {2, 2}, {2, 2}};
  check_gradient(
      "copy_to_group", 3, [](const Tensor& x, Communicator& g) { return ops::copy_to_group(x, g); }, {true, false},
      whole, whole);
  check_gradient(
      "reduce_from_group", 3, [](const Tensor& x, Communicator& g) { return ops::reduce_from_group(x, g); },
      {false, true}, whole, whole);
  check_gradient(
      "gather_from_group", 3, [&](const Tensor& x, Communicator& g) { return ops::gather_from_group(x, g, widths); },
      {false, true}, sliced, whole);
  check_gradient(
      "scatter_to_group", 3, [&](const Tensor& x, Communicator& g) { return ops::scatter_to_group(x, g, widths); },
      {true, false}, whole, sliced);
  // Forward values: the gather puts each rank's columns side by side.
  std::vector<Tensor> pieces{Tensor::from_vector({1, 3}, std::vector<float>{1, 2, 3}),
                             Tensor::from_vector({1, 2}, std::vector<float>{4, 5}),
                             Tensor::from_vector({1, 2}, std::vector<float>{6, 7})};
  auto comms = distribute::make_in_process_communicators(3);
  std::vector<Tensor> gathered(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      gathered[static_cast<size_t>(r)] = ops::gather_from_group(pieces[static_cast<size_t>(r)], *comms[r], widths);
    });
  for (auto& t : threads) t.join();
  for (const Tensor& g : gathered) EXPECT_EQ(g.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7}));
}

// --- mlp5 split against one device ---

TEST(ModelParallel, Mlp5SplitTwoAndThreeWaysTrainsAsOneDeviceInFit) {
  Data d = data(640);  // 20 steps of 32
  auto one = mlp5(nullptr, 0.2f);
  one->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
  for (int n : {2, 3}) {
    distribute::ModelParallelStrategy split(n);
    Timeline timeline;  // each device's forward, backward and update, and the collectives inside
    split.extended().set_timeline(&timeline);
    auto model = mlp5(&split, 0.2f);
    History h = model->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
    expect_close(*one, *model, 1e-5, fmt::format("model-parallel:{}", n));
    auto totals = timeline.totals();
    EXPECT_EQ(totals["forward"].count, 20 * n);
    // 3 pairs: one sum forward each, one backward each but the first (its input is the data).
    EXPECT_EQ(totals["all_reduce"].count, 20 * n * 5);
    split.extended().set_timeline(nullptr);
    // Twice: the same bits.
    distribute::ModelParallelStrategy again(n);
    auto model2 = mlp5(&again, 0.2f);
    model2->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
    expect_close(*model, *model2, 0, fmt::format("model-parallel:{} twice", n));
  }
}

// The plan's other paths: layers that need whole samples run whole on every device (Flatten,
// batch normalization), an Activation between a pair runs split, a Dense without a partner is
// split by columns and gathered (softmax on whole rows), and a Dense with fewer units than devices
// stays whole; under {.auto_split = false} only Dense({.shards = N}) splits, and another count is
// named.
TEST(ModelParallel, EveryPathOfThePlanTrainsAsOneDevice) {
  Tensor x = testing::random_tensor({96, 4, 4, 2}, 5, 0.0f, 1.0f);
  std::vector<int32_t> labels(96);
  for (int i = 0; i < 96; ++i) labels[static_cast<size_t>(i)] = i % 5;
  Tensor y = Tensor::from_vector({96}, std::span<const int32_t>(labels));
  auto make = [](distribute::Strategy* strategy, int shards) {
    std::optional<distribute::Strategy::Scope> scope;
    if (strategy != nullptr) scope.emplace(strategy);
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 11});
    m->add(Flatten({.input_shape = Shape{4, 4, 2}}));
    m->add(Dense(24, "", {.shards = shards}));
    m->add(layers::Activation("tanh"));
    m->add(Dropout(0.25f));
    m->add(Dense(20, "relu"));
    m->add(BatchNormalization());
    m->add(Dense(2, "relu"));  // fewer units than 3 devices: whole
    m->add(Dense(5, "softmax", {.shards = shards}));
    // SGD: RMSprop would turn the rounding noise of gradients that are nearly zero here (two
    // ReLU units, a softmax of five) into whole steps, on one device as much as split.
    m->compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), "sparse_categorical_crossentropy", {"accuracy"});
    return m;
  };
  auto one = make(nullptr, 1);
  one->fit(x, y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  distribute::ModelParallelStrategy three(3);
  auto split = make(&three, 1);
  split->fit(x, y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  expect_close(*one, *split, 1e-5, "every path, model-parallel:3");
  // By hand: the first Dense pairs with the second only if both are marked; here the last one
  // alone is (column split, gathered).
  distribute::ModelParallelStrategy by_hand({.num_shards = 2, .auto_split = false});
  auto marked = make(&by_hand, 2);
  marked->fit(x, y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  expect_close(*one, *marked, 1e-5, "Dense({.shards = 2}) only");
  distribute::ModelParallelStrategy four(4);
  auto wrong = make(&four, 2);
  std::string said;
  try {
    wrong->fit(x, y, {.epochs = 1, .batch_size = 32, .verbose = 0});
  } catch (const Error& e) {
    said = e.what();
  }
  EXPECT_NE(said.find("made with {.shards = 2} but ModelParallelStrategy splits over 4 devices"), std::string::npos)
      << said;
}

// Data × model on a mesh of devices: D copies of the model split T ways, each copy on its rows of
// the global batch, the gradients summed over the copies of each piece only (its data group),
// train as one device; a global batch with fewer rows than copies (the epoch's last: 650 rows in
// batches of 32 leave 10, over 3 copies of 3, 3, 4; and one of 2 rows over 3 copies) too.
TEST(ModelParallel, DataTimesModelOnAMeshTrainsAsOneDevice) {
  for (auto [copies, pieces, rows] : {std::tuple{2, 2, int64_t{640}}, std::tuple{3, 2, int64_t{650}},
                                      std::tuple{2, 1, int64_t{640}}, std::tuple{3, 2, int64_t{66}}}) {
    Data d = data(rows);
    auto one = mlp5(nullptr, 0.2f);
    History alone = one->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
    distribute::ModelParallelStrategy mesh({.num_shards = pieces, .data_replicas = copies});
    EXPECT_EQ(mesh.name(), fmt::format("mirrored:{}+model-parallel:{}", copies, pieces));
    auto model = mlp5(&mesh, 0.2f);
    History h = model->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
    std::string what = fmt::format("{} copies × {} pieces, {} rows", copies, pieces, rows);
    expect_close(*one, *model, 1e-5, what);
    // The epoch's loss and accuracy, from every copy's rows.
    EXPECT_NEAR(h.history["loss"][0], alone.history["loss"][0], 1e-5 * alone.history["loss"][0]) << what;
    EXPECT_EQ(h.history["accuracy"][0], alone.history["accuracy"][0]) << what;
  }
  // Named as the command line takes it; a custom loop's step is refused over several copies.
  auto named = distribute::make_strategy("mirrored:2+model-parallel:2", 1);
  EXPECT_EQ(named->name(), "mirrored:2+model-parallel:2");
  std::string said;
  try {
    named->run([] { return 0; });
  } catch (const Error& e) {
    said = e.what();
  }
  EXPECT_NE(said.find("a custom loop's step runs on one copy of the split model"), std::string::npos) << said;
}

// A custom loop (the step on every device through run(), the batch passed by capture) trains as
// the same loop on one device.
TEST(ModelParallel, Mlp5SplitTrainsAsOneDeviceInACustomLoop) {
  Data d = data(640);
  auto loop = [&](Model& model, distribute::Strategy* strategy) {
    for (int64_t step = 0; step < 20; ++step) {
      Tensor x = d.x.slice(step * 32, step * 32 + 32), y = d.y.slice(step * 32, step * 32 + 32);
      auto body = [&] {
        GradientTape tape;
        Tensor loss = ops::mean(model.loss().per_sample(y, model(x, true)));
        std::vector<Variable*> variables = model.trainable_variables();
        model.optimizer().apply(variables, tape.gradient(loss, variables));
        return loss;
      };
      if (strategy == nullptr) body();
      else strategy->run(body);
    }
  };
  auto one = mlp5(nullptr, 0.2f);
  loop(*one, nullptr);
  for (int n : {2, 3}) {
    distribute::ModelParallelStrategy split(n);
    auto model = mlp5(&split, 0.2f);
    loop(*model, &split);
    expect_close(*one, *model, 1e-5, fmt::format("custom loop, model-parallel:{}", n));
    EXPECT_EQ(model->optimizer().iterations(), 20);
  }
}

// Checkpoints are whole: a split model's file read by an unsplit one predicts what the devices
// compute; a run resumes across the split both ways (variables, Adam's slots and step) as one
// device's run of the same epochs.
TEST(ModelParallel, CheckpointsAreWholeAndResumeAcrossTheSplit) {
  testing::TempDir dir;
  Data d = data(320);  // 10 steps of 32 per epoch
  FitOptions first{.epochs = 1, .batch_size = 32, .verbose = 0}, second = first;
  second.initial_epoch = 1;
  second.epochs = 2;
  auto whole = mlp5(nullptr, 0.2f);
  whole->fit(d.x, d.y, {.epochs = 2, .batch_size = 32, .verbose = 0});

  distribute::ModelParallelStrategy split(3);
  auto split_model = mlp5(&split, 0.2f);
  split_model->fit(d.x, d.y, first);
  split_model->save_weights(dir.file("split.safetensors"));
  // The devices' forward pass against the unsplit model reading the file.
  Tensor x = d.x.slice(0, 64);
  auto on_devices = split.run([&] { return (*split_model)(x, false); });
  auto reader = mlp5(nullptr, 0.2f);
  reader->build(Shape{784});
  reader->load_weights(dir.file("split.safetensors"));
  std::vector<float> a = on_devices[0].to_vector(), b = reader->predict(x).to_vector();
  ASSERT_EQ(a.size(), b.size());
  float scale = 0;  // the logits' largest magnitude: the row shards' sums round in their own order
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6 * scale) << i << " of logits up to " << scale;
  // After fit the whole model holds: what a callback sets there (EarlyStopping's best weights) is
  // what a checkpoint writes, and what the devices train on next.
  std::vector<Variable*> variables = split_model->variables();
  variables[0]->value.copy_from(Tensor::zeros(variables[0]->value.shape()));
  EXPECT_EQ(split_model->state()[0].second.to_vector(), std::vector<float>(784 * 160, 0.0f));
  split_model->load_weights(dir.file("split.safetensors"));
  // Split, then unsplit: the second epoch from the split file.
  reader->fit(d.x, d.y, second);
  expect_close(*whole, *reader, 1e-5, "split then unsplit");

  // Unsplit, then split.
  auto half = mlp5(nullptr, 0.2f);
  half->fit(d.x, d.y, first);
  half->save_weights(dir.file("whole.safetensors"));
  distribute::ModelParallelStrategy again(2);
  auto resumed = mlp5(&again, 0.2f);
  resumed->build(Shape{784});
  resumed->load_weights(dir.file("whole.safetensors"));
  resumed->fit(d.x, d.y, second);
  expect_close(*whole, *resumed, 1e-5, "unsplit then split");
}

// A per-device memory limit: a model whose variables and slots exceed one device is refused
// before training, naming what it needs and the limit; split over enough devices it trains.
TEST(ModelParallel, AModelTooBigForOneDeviceIsRefusedAndTrainsSplit) {
  Data d = data(64);
  // mlp5 with Adam: 0.23 M parameters, each with 2 slots: 2.8 MB whole; a 1.5 MB device.
  int64_t limit = 1500000;
  distribute::ModelParallelStrategy one({.num_shards = 1, .device_memory_bytes = limit});
  auto big = mlp5(&one, 0.0f);
  std::string said;
  try {
    big->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
  } catch (const Error& e) {
    said = e.what();
  }
  EXPECT_NE(said.find("model-parallel:1: the model needs 2.8 MB on a device"), std::string::npos) << said;
  EXPECT_NE(said.find("more than the 1.5 MB each device has"), std::string::npos) << said;
  EXPECT_EQ(big->optimizer().iterations(), 0);  // refused before any step
  distribute::ModelParallelStrategy two({.num_shards = 2, .device_memory_bytes = limit});
  auto split_model = mlp5(&two, 0.0f);
  split_model->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
  EXPECT_EQ(split_model->optimizer().iterations(), 2);
}

// More devices than the widest Dense layer has units splits nothing: refused before any step,
// naming the layer and both counts (mlp5's layers have 160 units).
TEST(ModelParallel, ASplitWiderThanEveryLayerIsRefusedByName) {
  Data d = data(64);
  distribute::ModelParallelStrategy wide({.num_shards = 161});
  auto model = mlp5(&wide, 0.0f);
  std::string said;
  try {
    model->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
  } catch (const Error& e) {
    said = e.what();
  }
  EXPECT_NE(said.find("model-parallel:161: no Dense layer of the model can be split 161 ways: the widest, Dense "
                      "\"dense\", has 160 units"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("split over at most 160 devices"), std::string::npos) << said;
  EXPECT_EQ(model->optimizer().iterations(), 0);
}

}  // namespace
}  // namespace tandem
