// The Strategy API for custom training loops: run, reduce, gather, distribute_dataset,
// distribute_values_from_function, and a tape + Optimizer::apply loop under MirroredStrategy
// and CentralStorageStrategy giving the single-device result on the same global batch.
#include "tandem/distribute/strategy.h"
#include "tandem/distribute/strategy_registry.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

std::unique_ptr<Model> make_model() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 11});
  m->add(Dense(12, "relu", {.input_shape = Shape{5}}));
  m->add(Dropout(0.25f));
  m->add(Dense(3));
  return m;
}

data::Dataset blobs(int64_t n) {  // batches of 24
  Tensor x = testing::random_tensor({n, 5}, 2);
  std::vector<int32_t> l(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) l[static_cast<size_t>(i)] = static_cast<int32_t>(i % 3);
  return data::Dataset::from_tensor_slices({x, Tensor::from_vector({n}, std::span<const int32_t>(l))}).batch(24);
}

// The custom loop of the docs, written once; `strategy` null runs it on one device.
std::vector<double> train(Model& model, Optimizer& optimizer, distribute::Strategy* strategy, int epochs,
                          int64_t rows) {
  Loss loss_fn = Loss::sparse_categorical_crossentropy(true);
  auto step = [&](const data::Element& batch) {
    GradientTape tape;
    Tensor loss = compute_average_loss(loss_fn.per_sample(batch[1], model(batch[0], true)));
    std::vector<Variable*> variables = model.trainable_variables();
    optimizer.apply(variables, tape.gradient(loss, variables));
    return loss;
  };
  std::vector<double> losses;
  data::Dataset dataset = blobs(rows);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total = 0.0;
    if (strategy == nullptr) {
      auto it = dataset.iterate(epoch);
      while (auto batch = it->next()) total += step(*batch).item();
    } else {
      auto it = strategy->distribute_dataset(dataset).iterate(epoch);
      while (auto batch = it.next())
        total += strategy->reduce(distribute::ReduceOp::Sum, strategy->run(step, *batch)).item();
    }
    losses.push_back(total);
  }
  return losses;
}

void expect_same_as_one_device(distribute::Strategy& strategy, int64_t rows = 96) {
  auto reference = make_model();
  optimizers::Adam adam0(0.02f);
  std::vector<double> expected = train(*reference, adam0, nullptr, 3, rows);

  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = make_model();
  }
  optimizers::Adam adam(0.02f);
  std::vector<double> got = train(*model, adam, &strategy, 3, rows);
  for (size_t e = 0; e < expected.size(); ++e) EXPECT_NEAR(got[e], expected[e], 1e-5 * (1 + std::abs(expected[e])));
  auto a = reference->variables(), b = model->variables();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    auto va = a[i]->value.to_vector();
    EXPECT_TRUE(testing::all_close(b[i]->value, std::vector<double>(va.begin(), va.end()), 1e-6, 1e-5)) << a[i]->name;
  }
  for (int r = 1; r < strategy.num_replicas_in_sync(); ++r) {
    auto mine = model->replica_variables(r);
    for (size_t i = 0; i < b.size(); ++i)
      EXPECT_EQ(mine[i]->value.to_vector(), b[i]->value.to_vector()) << "replica " << r;
  }
  EXPECT_EQ(adam.iterations(), adam0.iterations());
}

TEST(CustomLoop, MirroredTapeLoopMatchesOneDevice) {
  for (int replicas : {2, 3}) {
    distribute::MirroredStrategy mirrored(replicas, 1);
    expect_same_as_one_device(mirrored);
  }
}

TEST(CustomLoop, CentralStorageTapeLoopMatchesOneDevice) {
  distribute::CentralStorageStrategy central(2, 1);
  expect_same_as_one_device(central);
}

// 97 rows: the last global batch has one row, so all replicas but the last have none. They
// contribute zero gradients, and compute_average_loss divides by the one row, as one device does.
TEST(CustomLoop, ABatchWithFewerRowsThanReplicasMatchesOneDevice) {
  for (int replicas : {2, 3}) {
    distribute::MirroredStrategy mirrored(replicas, 1);
    expect_same_as_one_device(mirrored, 97);
  }
  distribute::CentralStorageStrategy central(2, 1);
  expect_same_as_one_device(central, 97);
}

TEST(CustomLoop, AModelMadeOutsideTheScopeIsRefusedInsideRun) {
  distribute::MirroredStrategy mirrored(2, 1);
  auto model = make_model();
  Tensor x = testing::random_tensor({4, 5}, 1);
  EXPECT_TRUE(testing::throws_error([&] { mirrored.run([&] { return model->operator()(x, true); }); },
                                    {"made outside its scope", "mirrored:2"}));
}

TEST(StrategyApi, ReduceGatherAndValuesFromFunction) {
  distribute::MirroredStrategy mirrored(3, 1);
  auto values = mirrored.distribute_values_from_function([](int r) {
    return Tensor::full({2, 2}, static_cast<float>(r + 1));
  });
  ASSERT_EQ(values.size(), 3);
  // run hands each replica its own value and returns one result per replica, from its thread.
  auto doubled = mirrored.run(
      [](const Tensor& t) {
        const auto* context = distribute::replica_context();
        EXPECT_NE(context, nullptr);
        return ops::scale(t, 2.0f * static_cast<float>(context->num_replicas_in_sync()) / 3.0f);
      },
      values);
  EXPECT_EQ(mirrored.reduce(distribute::ReduceOp::Sum, doubled).to_vector(), std::vector<float>(4, 12.0f));
  EXPECT_EQ(mirrored.reduce(distribute::ReduceOp::Mean, values).to_vector(), std::vector<float>(4, 2.0f));
  Tensor g0 = mirrored.gather(values, 0), g1 = mirrored.gather(values, 1);
  EXPECT_EQ(g0.shape(), (Shape{6, 2}));
  EXPECT_EQ(g0.to_vector(), (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}));
  EXPECT_EQ(g1.shape(), (Shape{2, 6}));
  EXPECT_EQ(g1.to_vector(), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  // Inside run, a replica context sums across replicas.
  auto sums = mirrored.run(
      [](const Tensor& t) {
        return distribute::replica_context()->all_reduce(distribute::ReduceOp::Sum, {&t, 1})[0];
      },
      values);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(sums[r].to_vector(), std::vector<float>(4, 6.0f));
  EXPECT_EQ(distribute::replica_context(), nullptr);
}

TEST(StrategyApi, DistributeDatasetSplitsEachGlobalBatch) {
  distribute::MirroredStrategy mirrored(2, 1);
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  auto ds = data::Dataset::from_tensor_slices({Tensor::from_vector({10}, std::span<const float>(v))}).batch(4);
  auto it = mirrored.distribute_dataset(ds).iterate();
  std::vector<std::vector<float>> parts;
  while (auto b = it.next())
    for (int r = 0; r < 2; ++r) parts.push_back((*b)[r][0].to_vector());
  ASSERT_EQ(parts.size(), 6u);  // batches of 4, 4 and the remainder 2
  EXPECT_EQ(parts[0], (std::vector<float>{0, 1}));
  EXPECT_EQ(parts[1], (std::vector<float>{2, 3}));
  EXPECT_EQ(parts[5], (std::vector<float>{9}));
  // A global batch of fewer rows than replicas: the first replicas get none (they contribute zeros).
  auto odd =
      mirrored.distribute_dataset(ds.take(1).map([](data::Element e) { return data::Element{e[0].slice(0, 1)}; }))
          .iterate();
  auto one = odd.next();
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ((*one)[0][0].shape(), (Shape{0}));
  EXPECT_EQ((*one)[1][0].to_vector(), (std::vector<float>{0}));
}

TEST(StrategyApi, PerReplicaArgumentsMustMatchTheReplicas) {
  distribute::MirroredStrategy mirrored(2, 1);
  distribute::PerReplica<Tensor> three{{Tensor::zeros({1}), Tensor::zeros({1}), Tensor::zeros({1})}};
  EXPECT_TRUE(testing::throws_error([&] { mirrored.run([](const Tensor& t) { return t; }, three); },
                                    {"3 values", "2 replicas"}));
  EXPECT_TRUE(
      testing::throws_error([&] { mirrored.reduce(distribute::ReduceOp::Sum, three); }, {"3 values", "2 replicas"}));
  distribute::PerReplica<Tensor> mismatched{{Tensor::zeros({2}), Tensor::zeros({3})}};
  EXPECT_TRUE(testing::throws_error([&] { mirrored.reduce(distribute::ReduceOp::Sum, mismatched); },
                                    {"replica 1", "(3,)", "(2,)"}));
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A strategy written against the hooks alone, touching neither fit nor the optimizers: each
// replica trains on its own share of every global batch with no reduction (LocalSGD between
// two averagings). Replica r must end where one device ends after training on those rows alone.
class IndependentReplicas : public distribute::MirroredExtended {
 public:
  using MirroredExtended::MirroredExtended;
  std::string name() const override { return "independent"; }
  distribute::UpdateRule& update_rule() const override {
    static Local rule;
    return rule;
  }

 private:
  struct Local : distribute::UpdateRule {
    void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> grads) override {
      apply_reduced(optimizer, variables, grads);
    }
    void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                       std::span<const Tensor> grads) override {
      const distribute::ReplicaContext& replica = *distribute::replica_context();
      replica.strategy->extended().replica_optimizer(optimizer, replica, variables).apply_here(variables, grads);
    }
  };
};

std::unique_ptr<Model> small_model() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 5});
  m->add(Dense(6, "tanh", {.input_shape = Shape{5}}));
  m->add(Dense(3));
  return m;
}

TEST(StrategyHooks, AnUpdateRuleDecidesHowOptimizerApplyActs) {
  const int64_t rows = 48, per_replica = 8;  // global batches of 16: rows [16k, 16k+8) to replica 0
  Tensor x = testing::random_tensor({rows, 5}, 2);
  std::vector<int32_t> l(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) l[static_cast<size_t>(i)] = static_cast<int32_t>(i % 3);
  auto global = data::Dataset::from_tensor_slices({x, Tensor::from_vector({rows}, std::span<const int32_t>(l))})
                    .batch(2 * per_replica);
  Loss loss_fn = Loss::sparse_categorical_crossentropy(true);
  auto step_on = [&](Model& model, Optimizer& optimizer, const data::Element& batch) {
    GradientTape tape;
    Tensor loss = compute_average_loss(loss_fn.per_sample(batch[1], model(batch[0], true)), batch[0].dim(0));
    std::vector<Variable*> variables = model.trainable_variables();
    optimizer.apply(variables, tape.gradient(loss, variables));
  };
  distribute::StrategyOf<IndependentReplicas> strategy(
      std::make_unique<IndependentReplicas>(distribute::MirroredOptions{.num_replicas = 2, .threads_per_replica = 1}));
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = small_model();
  }
  optimizers::SGD sgd(0.1f, {.momentum = 0.9f});
  auto it = strategy.distribute_dataset(global).iterate();
  while (auto batch = it.next()) strategy.run([&](const data::Element& b) { step_on(*model, sgd, b); }, *batch);

  for (int r = 0; r < 2; ++r) {
    auto reference = small_model();
    optimizers::SGD sgd0(0.1f, {.momentum = 0.9f});
    auto shard = global.map([&](data::Element e) {
      return data::Element{e[0].slice(r * per_replica, (r + 1) * per_replica),
                           e[1].slice(r * per_replica, (r + 1) * per_replica)};
    });
    auto shard_it = shard.iterate();
    while (auto b = shard_it->next()) step_on(*reference, sgd0, *b);
    auto expected = reference->variables(), got = model->replica_variables(r);
    ASSERT_EQ(expected.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      auto v = expected[i]->value.to_vector();
      EXPECT_TRUE(testing::all_close(got[i]->value, std::vector<double>(v.begin(), v.end()), 1e-6, 1e-5))
          << "replica " << r << " " << got[i]->name;
    }
  }
  // The replicas really differ: nothing was reduced.
  EXPECT_NE(model->replica_variables(0)[0]->value.to_vector(), model->replica_variables(1)[0]->value.to_vector());
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A model made outside any scope owns the default strategy, an object like any other.
TEST(StrategyHooks, TheDefaultStrategyIsAnObject) {
  Sequential model;
  ASSERT_NE(model.strategy(), nullptr);
  EXPECT_EQ(model.strategy()->name(), "default");
  EXPECT_EQ(model.strategy()->num_replicas_in_sync(), 1);
  EXPECT_EQ(distribute::make_strategy("default")->name(), "default");
}

// Deterministic mirrored training cuts each global batch into micro-batches; a custom loop's
// replicas get the rows of their micro-batches, as fit's do (one splitting policy).
TEST(StrategyApi, DistributeDatasetSplitsAsTheStrategySplitsFitsBatches) {
  distribute::MirroredStrategy deterministic(
      {.num_replicas = 3, .threads_per_replica = 1, .deterministic = true, .micro_batches = 4});
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  auto ds = data::Dataset::from_tensor_slices({Tensor::from_vector({8}, std::span<const float>(v))}).batch(8);
  auto it = deterministic.distribute_dataset(ds).iterate();
  auto batch = it.next();
  ASSERT_TRUE(batch.has_value());
  // 4 parts of 2 rows; replica r computes parts [4r/3, 4(r+1)/3): {0}, {1}, {2, 3}.
  EXPECT_EQ((*batch)[0][0].to_vector(), (std::vector<float>{0, 1}));
  EXPECT_EQ((*batch)[1][0].to_vector(), (std::vector<float>{2, 3}));
  EXPECT_EQ((*batch)[2][0].to_vector(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(batch->first_row, 0);
}

// A strategy decides how fit's steps run (make_step) and what a checkpoint holds (collect_state):
// fit's loop only feeds batches and reads back the loss.
class CountingExtended : public distribute::DefaultExtended {
 public:
  struct Runner : distribute::StepRunner {
    explicit Runner(CountingExtended& owner) : owner(owner) {}
    bool lazy_batches() const override { return false; }
    void check_batch(bool, int64_t, int, int64_t) override { ++owner.checks; }
    std::optional<double> run(const distribute::GlobalBatch& batch, uint64_t) override {
      owner.rows += batch.rows;
      return 0.5;
    }
    CountingExtended& owner;
  };
  std::unique_ptr<distribute::StepRunner> make_step(const distribute::StepParts&) override {
    ++runners;
    return std::make_unique<Runner>(*this);
  }
  void collect_state(std::vector<std::pair<std::string, Tensor>>& state) override {
    for (auto& [name, value] : state)
      if (name.ends_with("kernel")) value = Tensor::full(value.shape(), 7.0f);
  }
  int runners = 0, checks = 0;
  int64_t rows = 0;
};

TEST(StrategyHooks, TheStrategyMakesFitsStepAndCollectsTheStateToSave) {
  distribute::StrategyOf<CountingExtended> strategy(std::make_unique<CountingExtended>());
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = small_model();
  }
  model->compile(optimizers::SGD(0.1f), Loss::sparse_categorical_crossentropy(true));
  Tensor x = testing::random_tensor({10, 5}, 3);
  Tensor y = Tensor::zeros({10}, DType::Int32);
  History h = model->fit(x, y, {.epochs = 2, .batch_size = 4, .verbose = 0});
  EXPECT_EQ(strategy.extended().runners, 1);
  EXPECT_EQ(strategy.extended().checks, 2 * 3);  // 3 batches an epoch, each checked
  EXPECT_EQ(strategy.extended().rows, 2 * 10);
  EXPECT_EQ(h.history["loss"], (std::vector<double>{0.5, 0.5}));
  testing::TempDir dir;
  model->save_weights(dir.file("w.safetensors"));
  for (auto& [name, t] : io::load_safetensors(dir.file("w.safetensors")).tensors)
    if (name.ends_with("kernel")) EXPECT_EQ(t.to_vector(), std::vector<float>(static_cast<size_t>(t.numel()), 7.0f));
}

}  // namespace
}  // namespace tandem
