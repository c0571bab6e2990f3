// batch_norm_parts: a batch of 6 rows cut in parts of 2, 1 and 3 rows (one replica, so the
// gather hands the values back). Synchronized, it must compute what batch_norm computes on the
// whole batch; unsynchronized, what batch_norm computes on each part. Forward against the double
// reference, gradients of every part's input, gamma and beta against finite differences.
#include "reference.h"
#include "tandem/autograd.h"
#include "test_util.h"

namespace tandem {
namespace {

using reference::Vec;

constexpr int64_t kChannels = 4;
const std::vector<int64_t> kRows = {2, 1, 3};

// The reference on the concatenated rows: one batch, or each part on its own.
Vec reference_parts(const std::vector<Vec>& xs, const Vec& gamma, const Vec& beta, bool synchronized) {
  Vec out;
  if (synchronized) {
    Vec all;
    for (const Vec& x : xs) all.insert(all.end(), x.begin(), x.end());
    return reference::batch_norm(all, gamma, beta, kChannels, 1e-3, true, {}, {});
  }
  for (const Vec& x : xs) {
    Vec y = reference::batch_norm(x, gamma, beta, kChannels, 1e-3, true, {}, {});
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

ops::GatherParts one_replica() {
  return [](std::span<const double> values, size_t) { return std::vector<double>(values.begin(), values.end()); };
}

TEST(BatchNormParts, MatchesTheReferenceAndFiniteDifferences) {
  for (bool synchronized : {true, false}) {
    SCOPED_TRACE(synchronized ? "synchronized" : "ghost batches");
    std::vector<Tensor> xs, gammas, betas;
    std::vector<Vec> ref_xs;
    Tensor gamma = testing::random_tensor(Shape{kChannels}, 7, 0.5f, 1.5f);
    Tensor beta = testing::random_tensor(Shape{kChannels}, 8);
    GradientTape tape;
    for (size_t i = 0; i < kRows.size(); ++i) {
      xs.push_back(testing::random_tensor(Shape{kRows[i], kChannels}, 20 + i));
      ref_xs.push_back(testing::to_double(xs.back()));
      gammas.push_back(gamma.reshape(gamma.shape()));  // each part its own gradient
      betas.push_back(beta.reshape(beta.shape()));
      for (const Tensor* t : {&xs.back(), &gammas.back(), &betas.back()}) tape.watch(*t);
    }
    Tensor moving_mean = Tensor::full({kChannels}, 0.1f), moving_var = Tensor::full({kChannels}, 0.8f);
    std::shared_ptr<ops::BatchNormPartsBackward> pending;
    std::vector<Tensor> ys = ops::batch_norm_parts(xs, gammas, betas, moving_mean, moving_var, 0.9f, 1e-3f,
                                                   synchronized, one_replica(), pending);
    EXPECT_EQ(pending != nullptr, synchronized);
    Vec g = testing::to_double(gamma), b = testing::to_double(beta);
    Vec expected = reference_parts(ref_xs, g, b, synchronized);
    // L = Σ y ⊙ w over every part's rows.
    Tensor weights = testing::random_tensor(Shape{static_cast<int64_t>(expected.size())}, 30);
    Vec w = testing::to_double(weights);
    Tensor loss;
    int64_t at = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
      Vec ref_y(expected.begin() + at, expected.begin() + at + ys[i].numel());
      EXPECT_TRUE(testing::all_close(ys[i], ref_y, 2e-5, 1e-4)) << "part " << i;
      Tensor wi = weights.slice(at, at + ys[i].numel()).reshape(ys[i].shape());
      Tensor part = ops::sum(ops::mul(ys[i], wi));
      loss = i == 0 ? part : ops::add(loss, part);
      at += ys[i].numel();
    }
    std::vector<Tensor> sources;
    for (size_t i = 0; i < xs.size(); ++i) sources.insert(sources.end(), {xs[i], gammas[i], betas[i]});
    std::vector<Tensor> grads = tape.gradient(loss, sources);
    if (pending) pending->finish();

    auto objective = [&](const std::vector<Vec>& x, const Vec& gm, const Vec& bt) {
      Vec y = reference_parts(x, gm, bt, synchronized);
      double s = 0;
      for (size_t k = 0; k < y.size(); ++k) s += y[k] * w[k];
      return s;
    };
    const double h = 1e-5;
    Vec dgamma(kChannels, 0.0), dbeta(kChannels, 0.0);
    for (size_t i = 0; i < xs.size(); ++i) {
      Vec numeric(ref_xs[i].size());
      for (size_t k = 0; k < numeric.size(); ++k) {
        auto plus = ref_xs, minus = ref_xs;
        plus[i][k] += h;
        minus[i][k] -= h;
        numeric[k] = (objective(plus, g, b) - objective(minus, g, b)) / (2 * h);
      }
      EXPECT_TRUE(testing::all_close(grads[3 * i], numeric, 3e-4, 3e-3)) << "dx of part " << i;
      Vec gi = testing::to_double(grads[3 * i + 1]), bi = testing::to_double(grads[3 * i + 2]);
      for (int64_t j = 0; j < kChannels; ++j) dgamma[j] += gi[j], dbeta[j] += bi[j];
    }
    // The parts' gamma and beta gradients add up to those of the one shared gamma and beta.
    Vec numeric_gamma(kChannels), numeric_beta(kChannels);
    for (int64_t j = 0; j < kChannels; ++j) {
      Vec gp = g, gm = g, bp = b, bm = b;
      gp[j] += h, gm[j] -= h, bp[j] += h, bm[j] -= h;
      numeric_gamma[j] = (objective(ref_xs, gp, b) - objective(ref_xs, gm, b)) / (2 * h);
      numeric_beta[j] = (objective(ref_xs, g, bp) - objective(ref_xs, g, bm)) / (2 * h);
    }
    for (int64_t j = 0; j < kChannels; ++j) {
      EXPECT_NEAR(dgamma[j], numeric_gamma[j], 3e-4 + 3e-3 * std::abs(numeric_gamma[j])) << "dgamma " << j;
      EXPECT_NEAR(dbeta[j], numeric_beta[j], 3e-4 + 3e-3 * std::abs(numeric_beta[j])) << "dbeta " << j;
    }

    // The moving statistics moved once, toward the global batch's statistics or the parts' average.
    Vec mean(kChannels, 0.0), var(kChannels, 0.0);
    std::vector<Vec> groups = synchronized ? std::vector<Vec>{} : ref_xs;
    if (synchronized) {
      Vec all;
      for (const Vec& x : ref_xs) all.insert(all.end(), x.begin(), x.end());
      groups.push_back(all);
    }
    for (const Vec& x : groups) {
      int64_t rows = static_cast<int64_t>(x.size()) / kChannels;
      for (int64_t j = 0; j < kChannels; ++j) {
        double m = 0, v = 0;
        for (int64_t r = 0; r < rows; ++r) m += x[r * kChannels + j] / rows;
        for (int64_t r = 0; r < rows; ++r) v += (x[r * kChannels + j] - m) * (x[r * kChannels + j] - m) / rows;
        mean[j] += m / static_cast<double>(groups.size());
        var[j] += v / static_cast<double>(groups.size());
      }
    }
    Vec expect_mean(kChannels), expect_var(kChannels);
    for (int64_t j = 0; j < kChannels; ++j) {
      expect_mean[j] = 0.1 * 0.9 + mean[j] * 0.1;
      expect_var[j] = 0.8 * 0.9 + var[j] * 0.1;
    }
    EXPECT_TRUE(testing::all_close(moving_mean, expect_mean, 1e-6, 1e-5));
    EXPECT_TRUE(testing::all_close(moving_var, expect_var, 1e-6, 1e-5));
  }
}

TEST(BatchNormParts, AReplicaWithoutRowsStillTakesPartInTheCollectives) {
  // No parts here; the other replica's one part has 2 rows with channel sums (3, 5) and squared
  // deviations (1, 2): the forward gathers twice, finish() gathers the backward sums.
  std::vector<size_t> sizes;
  ops::GatherParts gather = [&](std::span<const double> values, size_t per_part) {
    EXPECT_TRUE(values.empty());
    sizes.push_back(per_part);
    if (sizes.size() == 1) return std::vector<double>{3.0, 5.0, 2.0};
    if (sizes.size() == 2) return std::vector<double>{1.0, 2.0};
    return std::vector<double>(per_part, 0.5);
  };
  Tensor mm = Tensor::zeros({2}), mv = Tensor::full({2}, 1.0f);
  std::shared_ptr<ops::BatchNormPartsBackward> pending;
  auto ys = ops::batch_norm_parts({}, {}, {}, mm, mv, 0.5f, 1e-3f, true, gather, pending);
  EXPECT_TRUE(ys.empty());
  EXPECT_EQ(mm.to_vector(), (std::vector<float>{0.75f, 1.25f}));  // 0.5 · (1.5, 2.5)
  EXPECT_EQ(mv.to_vector(), (std::vector<float>{0.75f, 1.0f}));   // 0.5 + 0.5 · (0.5, 1)
  ASSERT_NE(pending, nullptr);
  pending->finish();
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 2, 4}));
}

TEST(BatchNormParts, FinishNamesABackwardThatDidNotReachEveryPart) {
  Tensor x = testing::random_tensor(Shape{3, 2}, 1), gamma = Tensor::full({2}, 1.0f), beta = Tensor::zeros({2});
  Tensor mm = Tensor::zeros({2}), mv = Tensor::full({2}, 1.0f);
  std::shared_ptr<ops::BatchNormPartsBackward> pending;
  GradientTape tape;
  tape.watch(x);
  ops::batch_norm_parts(std::vector<Tensor>{x}, std::vector<Tensor>{gamma}, std::vector<Tensor>{beta}, mm, mv, 0.9f,
                        1e-3f, true, one_replica(), pending);
  EXPECT_TRUE(testing::throws_error([&] { pending->finish(); }, {"backward reached 0 of this replica's 1 parts"}));
}

}  // namespace
}  // namespace tandem
