// Fast kernels against the naive references at sizes where blocking and vector paths engage.
#include <thread>

#include "kernels/cpu/kernels.h"
#include "reference.h"
#include "tandem/autograd.h"
#include "tandem/ops.h"
#include "tandem/runtime.h"
#include "test_util.h"

namespace tandem {
namespace {

TEST(Gemm, AllTransposesMatchNaive) {
  const int64_t m = 37, k = 129, n = 65;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = testing::random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
      Tensor b = testing::random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
      Tensor c = ops::matmul(a, b, ta, tb);
      auto ref = reference::matmul(testing::to_double(a), testing::to_double(b), m, k, n, ta, tb);
      EXPECT_TRUE(testing::all_close(c, ref, 1e-4, 1e-4)) << "ta=" << ta << " tb=" << tb;
    }
}

TEST(Conv2d, LargerShapesMatchNaive) {
  Tensor x = testing::random_tensor({4, 28, 28, 3}, 3);
  Tensor k = testing::random_tensor({3, 3, 3, 32}, 4);
  Tensor b = testing::random_tensor({32}, 5);
  for (Padding p : {Padding::Valid, Padding::Same}) {
    Tensor y = ops::conv2d(x, k, b, 1, 1, p);
    auto g = reference::conv_geometry(4, 28, 28, 3, 3, 3, 32, 1, 1, p);
    auto bd = testing::to_double(b);
    EXPECT_TRUE(testing::all_close(y, reference::conv2d(testing::to_double(x), testing::to_double(k), &bd, g), 1e-4, 1e-4));
  }
}

TEST(Pool2d, LargerShapesMatchNaive) {
  Tensor x = testing::random_tensor({4, 26, 26, 32}, 6);
  auto g = reference::conv_geometry(4, 26, 26, 32, 2, 2, 32, 2, 2, Padding::Valid);
  EXPECT_TRUE(testing::all_close(ops::max_pool2d(x, 2, 2, 2, 2, Padding::Valid), reference::pool2d(testing::to_double(x), g, true), 0, 0));
  EXPECT_TRUE(testing::all_close(ops::avg_pool2d(x, 2, 2, 2, 2, Padding::Valid), reference::pool2d(testing::to_double(x), g, false), 1e-6, 1e-6));
}

TEST(Activations, WideRowsMatchNaiveAcrossTheRange) {
  // 1000 values from -20 to 20 exercise the vectorized exp's range reduction.
  Tensor x = testing::random_tensor({10, 100}, 7, -20.0f, 20.0f);
  for (Activation a : {Activation::ELU, Activation::SELU, Activation::Sigmoid, Activation::Tanh, Activation::Softmax,
                       Activation::GELU, Activation::ReLU})
    EXPECT_TRUE(testing::all_close(ops::activation(x, a), reference::activation(testing::to_double(x), 100, a), 1e-6, 2e-6))
        << activation_name(a);
}

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

// A convolution's bits follow the thread count it runs with, not the one its cached primitive was
// first made with: a thread that ran at 2 threads and then 1 gets what a fresh 1-thread thread gets.
TEST(Conv2d, CachedPrimitivesFollowTheThreadCount) {
  Tensor x = testing::random_tensor(Shape{3, 6, 6, 1}, 1), kernel = testing::random_tensor(Shape{3, 3, 1, 4}, 2);
  auto run = [&] {
    GradientTape tape;
    tape.watch(kernel);
    Tensor y = ops::conv2d(x, kernel, Tensor(), 1, 1, Padding::Same);
    std::vector<float> out = y.to_vector();
    Tensor g = tape.gradient(ops::sum(ops::mul(y, y)), std::vector<Tensor>{kernel})[0];
    std::vector<float> grad = g.to_vector();
    out.insert(out.end(), grad.begin(), grad.end());
    return out;
  };
  int saved = num_threads();
  set_num_threads(2);
  run();
  set_num_threads(1);
  std::vector<float> here = run();
  set_num_threads(saved);
  std::vector<float> fresh;
  std::thread([&] {
    set_num_threads(1);
    fresh = run();
  }).join();
  EXPECT_EQ(here, fresh);
}

}  // namespace
}  // namespace tandem
