// The optimizers' update kernels against their formulas (Keras' forms), and model-sized updates
// cut over the intra-op threads.
#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tandem/runtime.h"
#include "test_util.h"

namespace tandem {
namespace {

TEST(Optimizers, AdamKernelMatchesTheFormula) {
  std::vector<float> w{0.5f, -1.0f}, g{0.1f, -0.2f}, m{0.0f, 0.05f}, v{0.0f, 0.01f};
  kernels::cpu::adam_update(w.data(), g.data(), m.data(), v.data(), 2, 0.01f, 0.9f, 0.999f, 1e-7f, 3);
  for (int i = 0; i < 2; ++i) {
    double mi = 0.9 * (i == 0 ? 0.0 : 0.05) + 0.1 * (i == 0 ? 0.1 : -0.2);
    double vi = 0.999 * (i == 0 ? 0.0 : 0.01) + 0.001 * (i == 0 ? 0.01 : 0.04);
    double alpha = 0.01 * std::sqrt(1 - std::pow(0.999, 3)) / (1 - std::pow(0.9, 3));
    double wi = (i == 0 ? 0.5 : -1.0) - alpha * mi / (std::sqrt(vi) + 1e-7);
    EXPECT_NEAR(w[i], wi, 1e-6);
    EXPECT_NEAR(m[i], mi, 1e-7);
    EXPECT_NEAR(v[i], vi, 1e-7);
  }
}

// A model-sized update is cut into parts run on the intra-op threads: every element is updated
// once (against the formula in double), and the bits do not depend on the thread count.
TEST(Optimizers, LargeUpdatesCutOverThreadsUpdateEveryElementOnce) {
  const int64_t n = 300'001;  // several parts, the last one not a whole cache line
  auto values = [&](uint64_t seed, float low, float high) {
    return testing::random_tensor({n}, seed, low, high).to_vector();
  };
  const std::vector<float> w0 = values(1, -1, 1), g = values(2, -1, 1), m0 = values(3, -0.1f, 0.1f),
                           v0 = values(4, 0, 0.01f);
  auto adam = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> w = w0, m = m0, v = v0;
    kernels::cpu::adam_update(w.data(), g.data(), m.data(), v.data(), n, 0.01f, 0.9f, 0.999f, 1e-7f, 3);
    w.insert(w.end(), m.begin(), m.end());
    w.insert(w.end(), v.begin(), v.end());
    return w;
  };
  auto sgd = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> w = w0, velocity = m0;
    kernels::cpu::sgd_update(w.data(), g.data(), velocity.data(), n, 0.1f, 0.9f, false);
    w.insert(w.end(), velocity.begin(), velocity.end());
    return w;
  };
  auto rmsprop = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> w = w0, ms = v0, velocity = m0;
    kernels::cpu::rmsprop_update(w.data(), g.data(), ms.data(), velocity.data(), n, 0.01f, 0.9f, 0.5f, 1e-7f);
    return w;
  };
  auto adagrad = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> w = w0, accumulator = v0;
    kernels::cpu::adagrad_update(w.data(), g.data(), accumulator.data(), n, 0.01f, 1e-7f);
    return w;
  };
  int saved = num_threads_setting();
  std::vector<float> one = adam(1);
  double alpha = 0.01 * std::sqrt(1 - std::pow(0.999, 3)) / (1 - std::pow(0.9, 3));
  for (int64_t i = 0; i < n; ++i) {
    double mi = 0.9 * m0[i] + 0.1 * g[i], vi = 0.999 * v0[i] + 0.001 * g[i] * g[i];
    ASSERT_NEAR(one[i], w0[i] - alpha * mi / (std::sqrt(vi) + 1e-7), 1e-5) << "w[" << i << "]";
    ASSERT_NEAR(one[n + i], mi, 1e-6) << "m[" << i << "]";
  }
  std::vector<float> sgd_one = sgd(1), rmsprop_one = rmsprop(1), adagrad_one = adagrad(1);
  for (int64_t i = 0; i < n; ++i) {
    double velocity = 0.9 * m0[i] - 0.1 * g[i];
    ASSERT_NEAR(sgd_one[i], w0[i] + velocity, 1e-6) << "sgd w[" << i << "]";
    double a = v0[i] + double{g[i]} * g[i];
    ASSERT_NEAR(adagrad_one[i], w0[i] - 0.01 * g[i] / (std::sqrt(a) + 1e-7), 1e-5) << "adagrad w[" << i << "]";
  }
  for (int threads : {2, 3}) {
    EXPECT_EQ(adam(threads), one) << threads << " threads";
    EXPECT_EQ(sgd(threads), sgd_one) << threads << " threads";
    EXPECT_EQ(rmsprop(threads), rmsprop_one) << threads << " threads";
    EXPECT_EQ(adagrad(threads), adagrad_one) << threads << " threads";
  }
  set_num_threads(saved);
}

TEST(Optimizers, SgdMomentumAndNesterovMatchKeras) {
  std::vector<float> w{1.0f}, g{0.5f}, vel{0.2f};
  kernels::cpu::sgd_update(w.data(), g.data(), vel.data(), 1, 0.1f, 0.9f, false);
  EXPECT_NEAR(vel[0], 0.9 * 0.2 - 0.1 * 0.5, 1e-7);
  EXPECT_NEAR(w[0], 1.0 + (0.9 * 0.2 - 0.1 * 0.5), 1e-7);
  std::vector<float> w2{1.0f}, vel2{0.2f};
  kernels::cpu::sgd_update(w2.data(), g.data(), vel2.data(), 1, 0.1f, 0.9f, true);
  EXPECT_NEAR(w2[0], 1.0 + 0.9 * (0.9 * 0.2 - 0.1 * 0.5) - 0.1 * 0.5, 1e-7);
}

TEST(Optimizers, RmspropAndAdagradMatchTheFormulas) {
  std::vector<float> w{1.0f}, g{0.5f}, ms{0.1f};
  kernels::cpu::rmsprop_update(w.data(), g.data(), ms.data(), nullptr, 1, 0.01f, 0.9f, 0.0f, 1e-7f);
  double msv = 0.9 * 0.1 + 0.1 * 0.25;
  EXPECT_NEAR(ms[0], msv, 1e-7);
  EXPECT_NEAR(w[0], 1.0 - 0.01 * 0.5 / (std::sqrt(msv) + 1e-7), 1e-6);
  std::vector<float> w2{1.0f}, acc{0.1f};
  kernels::cpu::adagrad_update(w2.data(), g.data(), acc.data(), 1, 0.01f, 1e-7f);
  EXPECT_NEAR(acc[0], 0.35, 1e-7);
  EXPECT_NEAR(w2[0], 1.0 - 0.01 * 0.5 / (std::sqrt(0.35) + 1e-7), 1e-6);
}

}  // namespace
}  // namespace tandem
