#pragma once
// What the tests of the strategies that split a model (model-parallel, pipeline) train and how they
// compare it with one device: mlp5 with dropout, MNIST-shaped data, and every tensor of two
// models' state within a tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/distribute/strategy.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem::testing {

inline std::unique_ptr<Model> mlp5(distribute::Strategy* strategy, float dropout) {
  std::optional<distribute::Strategy::Scope> scope;
  if (strategy != nullptr) scope.emplace(strategy);
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 7});
  m->add(layers::Dense(160, "elu", {.kernel_initializer = "he_normal", .input_shape = Shape{784}}));
  if (dropout > 0) m->add(layers::Dropout(dropout));
  for (int i = 0; i < 4; ++i) {
    m->add(layers::Dense(160, "elu", {.kernel_initializer = "he_normal"}));
    if (dropout > 0 && i % 2 == 1) m->add(layers::Dropout(dropout));
  }
  m->add(layers::Dense(10));
  m->compile(optimizers::Adam(0.001f), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  return m;
}

struct Data {
  Tensor x, y;
};
inline Data data(int64_t n) {
  Tensor x = testing::random_tensor({n, 784}, 3, 0.0f, 1.0f);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % 10);
  return {x, Tensor::from_vector({n}, std::span<const int32_t>(labels))};
}

// Every tensor of the state within `tolerance` of the other's, relative to its norm:
// ‖u − v‖ ≤ tolerance · ‖u‖ (0: the same bits); the optimizer's slots within 10 × tolerance. The
// split sums a row shard's partial products in another order than one matrix product does, and
// Adam's normalized steps carry the last bits on; a slot (the gradients' moving moments) is a
// sum of nearly cancelling terms, where those bits weigh more.
inline void expect_close(Model& a, Model& b, double tolerance, const std::string& what) {
  auto x = a.state(), y = b.state();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].first, y[i].first) << what;
    ASSERT_EQ(x[i].second.shape(), y[i].second.shape()) << what << ": " << x[i].first;
    std::vector<float> u = x[i].second.astype(DType::Float32).to_vector(),
                       v = y[i].second.astype(DType::Float32).to_vector();
    if (tolerance == 0) {
      EXPECT_EQ(u, v) << what << ": " << x[i].first;
      continue;
    }
    double diff = 0, norm = 0;
    for (size_t k = 0; k < u.size(); ++k) {
      diff += (static_cast<double>(u[k]) - v[k]) * (static_cast<double>(u[k]) - v[k]);
      norm += static_cast<double>(u[k]) * u[k];
    }
    double allowed = x[i].first.starts_with("optimizer/") ? 10 * tolerance : tolerance;
    EXPECT_LE(std::sqrt(diff), allowed * std::sqrt(norm)) << what << ": " << x[i].first;
  }
}

}  // namespace tandem::testing
