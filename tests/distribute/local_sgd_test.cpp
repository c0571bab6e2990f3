// LocalSgdStrategy, the strategy written against the hooks alone: replicas step alone on their
// shards and average their weights every K steps. Checked against the closed form of that on a
// linear model (mean squared error, plain SGD), in fit and in a custom loop, and named by
// make_strategy as the command line takes it.
#include "tandem/distribute/local_sgd.h"

#include "tandem/distribute/strategy_registry.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;
constexpr int64_t kFeatures = 3, kBatch = 8;
constexpr float kLr = 0.05f;

struct Linear {  // kernel (features) and bias of Dense(1), in double
  std::vector<double> w;
  double b = 0.0;
};

Linear weights_of(Model& model) {
  auto v = model.variables();
  std::vector<float> k = v[0]->value.to_vector(), b = v[1]->value.to_vector();
  return {std::vector<double>(k.begin(), k.end()), b[0]};
}

// N replicas from `start`, each taking SGD steps on rows [B·r/N, B·(r+1)/N) of each batch of
// kBatch rows with the gradient of its own mean squared error, averaged after every K-th step.
std::vector<Linear> closed_form(Linear start, const std::vector<float>& x, const std::vector<float>& y, int replicas,
                                int every, int steps) {
  std::vector<Linear> rep(static_cast<size_t>(replicas), start);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < replicas; ++r) {
      Linear& m = rep[static_cast<size_t>(r)];
      int64_t begin = s * kBatch + kBatch * r / replicas, end = s * kBatch + kBatch * (r + 1) / replicas;
      std::vector<double> gw(kFeatures, 0.0);
      double gb = 0.0;
      for (int64_t i = begin; i < end; ++i) {
        double pred = m.b;
        for (int64_t f = 0; f < kFeatures; ++f)
          pred += m.w[static_cast<size_t>(f)] * x[static_cast<size_t>(i * kFeatures + f)];
        double d = 2.0 * (pred - y[static_cast<size_t>(i)]) / static_cast<double>(end - begin);
        for (int64_t f = 0; f < kFeatures; ++f)
          gw[static_cast<size_t>(f)] += d * x[static_cast<size_t>(i * kFeatures + f)];
        gb += d;
      }
      for (int64_t f = 0; f < kFeatures; ++f) m.w[static_cast<size_t>(f)] -= kLr * gw[static_cast<size_t>(f)];
      m.b -= kLr * gb;
    }
    if ((s + 1) % every != 0) continue;
    Linear mean{std::vector<double>(kFeatures, 0.0), 0.0};
    for (const Linear& m : rep) {
      for (int64_t f = 0; f < kFeatures; ++f) mean.w[static_cast<size_t>(f)] += m.w[static_cast<size_t>(f)] / replicas;
      mean.b += m.b / replicas;
    }
    std::fill(rep.begin(), rep.end(), mean);
  }
  return rep;
}

void expect_near(const Linear& got, const Linear& want, const char* what) {
  for (int64_t f = 0; f < kFeatures; ++f)
    EXPECT_NEAR(got.w[static_cast<size_t>(f)], want.w[static_cast<size_t>(f)], 1e-5) << what << " kernel " << f;
  EXPECT_NEAR(got.b, want.b, 1e-5) << what << " bias";
}

struct Data {
  std::vector<float> x, y;
  Tensor tx, ty;
};

Data make_data(int64_t rows) {
  Data d;
  d.tx = testing::random_tensor({rows, kFeatures}, 5);
  d.x = d.tx.to_vector();
  for (int64_t i = 0; i < rows; ++i)  // a line plus a row-dependent wiggle, so that shards differ
    d.y.push_back(0.5f * d.x[static_cast<size_t>(i * kFeatures)] - d.x[static_cast<size_t>(i * kFeatures + 2)] +
                  0.3f * static_cast<float>(i % 5));
  d.ty = Tensor::from_vector({rows, 1}, std::span<const float>(d.y));
  return d;
}

std::unique_ptr<Model> linear_model() {
  auto model = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  model->add(Dense(1, "", {.input_shape = Shape{kFeatures}}));
  return model;
}

TEST(LocalSgd, FitMatchesTheClosedFormOfReplicasSteppingAloneAndAveraging) {
  for (int replicas : {2, 4}) {
    distribute::LocalSgdStrategy local({.num_replicas = replicas, .threads_per_replica = 1, .sync_every = 2});
    auto scope = local.scope();
    Data d = make_data(5 * kBatch);
    auto model = linear_model();
    model->compile(optimizers::SGD(kLr), "mse");
    Linear start = weights_of(*model);
    // 5 steps: averaged after steps 2 and 4, the replicas apart again after step 5.
    model->fit(d.tx, d.ty, {.batch_size = kBatch, .shuffle = false, .verbose = 0});
    std::vector<Linear> want = closed_form(start, d.x, d.y, replicas, 2, 5);
    for (int r = 0; r < replicas; ++r) {
      auto v = model->replica_variables(r);
      std::vector<float> k = v[0]->value.to_vector(), b = v[1]->value.to_vector();
      expect_near({std::vector<double>(k.begin(), k.end()), b[0]}, want[static_cast<size_t>(r)],
                  fmt::format("{} replicas, replica {}", replicas, r).c_str());
    }
    EXPECT_NE(model->replica_variables(0)[0]->value.to_vector(), model->replica_variables(1)[0]->value.to_vector())
        << "after a step that is not a multiple of K, the replicas have stepped apart";
  }
}

TEST(LocalSgd, AllFourStepsAveragedInACustomLoopAsInFit) {
  distribute::LocalSgdStrategy local({.num_replicas = 2, .threads_per_replica = 1, .sync_every = 4});
  auto scope = local.scope();
  Data d = make_data(4 * kBatch);
  auto model = linear_model();
  optimizers::SGD sgd(kLr);
  model->build(Shape{kFeatures});
  Linear start = weights_of(*model);
  Loss mse = Loss::mean_squared_error();
  auto dataset = local.distribute_dataset(data::Dataset::from_tensor_slices({d.tx, d.ty}).batch(kBatch));
  auto batches = dataset.iterate(0);
  while (auto batch = batches.next())
    local.run(
        [&](const data::Element& b) {
          GradientTape tape;
          Tensor loss = compute_average_loss(mse.per_sample(b[1], (*model)(b[0], true)));
          std::vector<Variable*> variables = model->trainable_variables();
          sgd.apply(variables, tape.gradient(loss, variables));
        },
        *batch);
  std::vector<Linear> want = closed_form(start, d.x, d.y, 2, 4, 4);
  expect_near(weights_of(*model), want[0], "custom loop");
  EXPECT_EQ(model->replica_variables(0)[0]->value.to_vector(), model->replica_variables(1)[0]->value.to_vector());
}

TEST(LocalSgd, NamedAsTheCommandLineTakesIt) {
  auto s = distribute::make_strategy("local_sgd:2:3");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->name(), "local_sgd:2:3");
  EXPECT_EQ(s->num_replicas_in_sync(), 2);
  EXPECT_EQ(dynamic_cast<distribute::LocalSgdExtended&>(s->extended()).sync_every(), 3);
  EXPECT_EQ(distribute::make_strategy("local_sgd:2")->name(), "local_sgd:2:4");
  EXPECT_TRUE(testing::throws_error([] { distribute::make_strategy("local_sgd:2:0"); },
                                    {"the steps between averages \"0\" is not a number from 1 to 999999"}));
  EXPECT_TRUE(testing::throws_error([] { distribute::LocalSgdStrategy bad({.num_replicas = 2, .sync_every = 0}); },
                                    {"sync_every must be at least 1 step, got 0"}));
}

}  // namespace
}  // namespace tandem
