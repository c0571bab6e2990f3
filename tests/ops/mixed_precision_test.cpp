// Mixed precision (Keras' mixed_bfloat16): the rounding to bf16, bf16 products against a naive
// reference on the rounded operands and against float32 within bf16's precision, the ops'
// gradients, the policy's names, and an MLP trained under the policy against float32. Where the
// CPU has no bf16 instructions the tests of the products are skipped, saying so, and the policy's
// fallback is checked instead.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/kernels.h"
#include "reference.h"
#include "tandem/tandem.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

// bf16 by its definition: the float's upper half, rounded to nearest with ties to even.
uint16_t bf16_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t low = u & 0xffffu, high = u >> 16;
  if (low > 0x8000u || (low == 0x8000u && (high & 1u) != 0)) ++high;
  return static_cast<uint16_t>(high);
}
double value_of(uint16_t b) {
  uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::vector<double> rounded(const Tensor& t) {
  std::vector<double> out;
  for (float v : t.to_vector()) out.push_back(value_of(bf16_of(v)));
  return out;
}

#define SKIP_WITHOUT_BF16()                                                                                    \
  if (!ops::has_bf16_products(Device::cpu()))                                                                  \
  GTEST_SKIP() << "this CPU has no bf16 instructions (AVX512_BF16 or AMX, as oneDNN sees them): the products " \
                  "stay float32 here"

TEST(MixedPrecision, RoundingToBf16IsToNearestWithTiesToEven) {
  float one_ulp = std::ldexp(1.0f, -7);  // bf16's spacing at 1
  std::vector<float> values{1.0f,
                            1.0f + one_ulp / 2,          // a tie, to the even 1.0
                            1.0f + one_ulp * 1.5f,       // a tie, to the even 1 + 2 ulp
                            1.0f + one_ulp / 2 + 1e-6f,  // past the tie: up
                            -3.14159f,
                            0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(),  // rounds up to infinity
                            1e-30f,
                            65504.0f};
  // Every length up to 70 (the vector path's tails), values cycling through the list and a spread.
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = i < static_cast<int64_t>(values.size()) ? values[static_cast<size_t>(i)]
                                                                          : std::sin(static_cast<float>(i)) * 1e3f;
    std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xbeef);
    kernels::cpu::round_to_bf16(x.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      float v = x[static_cast<size_t>(i)];
      uint16_t want = bf16_of(v), g = got[static_cast<size_t>(i)];
      if (std::isnan(v)) EXPECT_TRUE(std::isnan(value_of(g))) << "NaN at " << i << " of " << n;
      else EXPECT_EQ(g, want) << v << " at " << i << " of " << n;
    }
    EXPECT_EQ(got[static_cast<size_t>(n)], 0xbeef) << "wrote past " << n << " values";
  }
}

TEST(MixedPrecision, Bf16ProductsAreTheProductsOfTheRoundedOperands) {
  SKIP_WITHOUT_BF16();
  for (auto [m, k, n] : {std::array<int64_t, 3>{37, 129, 65}, std::array<int64_t, 3>{301, 171, 67},
                         std::array<int64_t, 3>{23, 171, 389}, std::array<int64_t, 3>{1, 7, 1}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = testing::random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
        Tensor b = testing::random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
        Tensor mixed, plain = ops::matmul(a, b, ta, tb);
        {
          ops::PrecisionScope scope(ops::Precision::MixedBFloat16);
          mixed = ops::matmul(a, b, ta, tb);
        }
        std::string what = fmt::format("{}x{}x{} ta={} tb={}", m, k, n, ta, tb);
        // Exact on the rounded operands up to float32 accumulation ...
        auto want = reference::matmul(rounded(a), rounded(b), m, k, n, ta, tb);
        EXPECT_TRUE(testing::all_close(mixed, want, 1e-5, 1e-5)) << what;
        // ... within bf16's precision of the float32 product: each operand off by at most 2^-9 of
        // itself, so each element by at most 2^-8 of the sum of its terms' magnitudes.
        auto magnitudes = [](const Tensor& t) {
          std::vector<double> v = testing::to_double(t);
          for (double& e : v) e = std::abs(e);
          return v;
        };
        auto bound = reference::matmul(magnitudes(a), magnitudes(b), m, k, n, ta, tb);
        std::vector<float> got = mixed.to_vector(), exact = plain.to_vector();
        int outside = 0;
        for (size_t i = 0; i < got.size(); ++i)
          outside += std::abs(double(got[i]) - exact[i]) > std::ldexp(bound[i], -8) + 1e-6 ? 1 : 0;
        EXPECT_EQ(outside, 0) << what;
        // ... and not the float32 product itself.
        if (k > 7) EXPECT_NE(mixed.to_vector(), plain.to_vector()) << what;
      }
}

// Forward and every gradient of dense (with the deferred kernel gradient too) and of a convolution
// over 16 channels, under the policy, against float32 within bf16's precision; the same bits at 1,
// 2 and 3 threads.
TEST(MixedPrecision, DenseAndConvGradientsAreFloat32sWithinBf16Precision) {
  SKIP_WITHOUT_BF16();
  Tensor x = testing::random_tensor({64, 96}, 1), kernel = testing::random_tensor({96, 40}, 2, -0.2f, 0.2f);
  Tensor bias = testing::random_tensor({40}, 3);
  Tensor image = testing::random_tensor({5, 9, 9, 16}, 4),
         filters = testing::random_tensor({3, 3, 16, 8}, 5, -0.2f, 0.2f);
  auto run = [&](ops::Precision precision, bool deferred) {
    ops::PrecisionScope scope(precision);
    GradientTape tape;
    for (const Tensor* t : {&x, &kernel, &bias, &image, &filters}) tape.watch(*t);
    std::optional<ops::DeferredKernelGradients> defer;
    if (deferred) defer.emplace().defer(kernel);
    Tensor y = ops::dense(x, kernel, bias, tandem::Activation::Tanh, defer ? &*defer : nullptr);
    Tensor z = ops::conv2d(image, filters, Tensor(), 1, 1, Padding::Same, tandem::Activation::ReLU);
    Tensor loss = ops::add(ops::sum(ops::mul(y, y)), ops::sum(ops::mul(z, z)));
    std::vector<Tensor> grads = tape.gradient(loss, std::vector<Tensor>{x, kernel, bias, image, filters});
    if (deferred) grads[1] = defer->gradient(kernel);
    std::vector<std::vector<float>> out{y.to_vector(), z.to_vector()};
    for (const Tensor& g : grads) out.push_back(g.to_vector());
    return out;
  };
  auto plain = run(ops::Precision::Float32, false), mixed = run(ops::Precision::MixedBFloat16, false);
  const char* names[] = {"dense", "conv2d", "dx", "dkernel", "dbias", "dimage", "dfilters"};
  for (size_t i = 0; i < plain.size(); ++i) {
    double error = 0, norm = 0;
    for (size_t j = 0; j < plain[i].size(); ++j) {
      error += std::pow(double(mixed[i][j]) - plain[i][j], 2);
      norm += std::pow(double(plain[i][j]), 2);
    }
    EXPECT_LT(std::sqrt(error / norm), 1e-2) << names[i];
    EXPECT_GT(error, 0.0) << names[i] << ": the same bits as float32, so not bf16 products";
  }
  // Under a tape dense rounds x and the kernel once for forward's product and backward's: the bits
  // of gemm_bf16 on the float32 operands, as the deferred kernel gradient (gemm_bf16 on x and dz) is.
  std::vector<float> direct(64 * 40);
  kernels::cpu::gemm_bf16(false, false, 64, 40, 96, 1.0f, x.data<float>(), 96, kernel.data<float>(), 40, 0.0f,
                          direct.data(), 40);
  kernels::cpu::bias_activation(direct.data(), bias.data<float>(), 64, 40, tandem::Activation::Tanh);
  EXPECT_EQ(mixed[0], direct) << "dense's forward against gemm_bf16";
  EXPECT_EQ(run(ops::Precision::MixedBFloat16, true)[3], mixed[3]) << "the deferred kernel gradient";
  int saved = num_threads_setting();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    EXPECT_EQ(run(ops::Precision::MixedBFloat16, false), mixed) << threads << " threads";
  }
  set_num_threads(saved);
}

// Restores the global policy when the test ends.
struct GlobalPolicy {
  explicit GlobalPolicy(const std::string& name) : saved(mixed_precision::global_policy()) {
    mixed_precision::set_global_policy(name);
  }
  ~GlobalPolicy() { mixed_precision::set_global_policy(saved); }
  std::string saved;
};

TEST(MixedPrecision, LayersTakeTheGlobalPolicyWhenMadeAndMistakesAreNamed) {
  Dense before(4);
  {
    GlobalPolicy policy("mixed_bfloat16");
    EXPECT_EQ(mixed_precision::global_policy(), "mixed_bfloat16");
    Dense during(4);
    EXPECT_EQ(during.dtype_policy(), "mixed_bfloat16");
    EXPECT_EQ(before.dtype_policy(), "float32");
    during.set_dtype_policy("float32");
    EXPECT_EQ(during.dtype_policy(), "float32");
  }
  EXPECT_EQ(mixed_precision::global_policy(), "float32");
  try {
    mixed_precision::set_global_policy("mixed_float16");
    ADD_FAILURE() << "mixed_float16 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mixed_float16' is not supported: float16 products are a GPU's"),
              std::string::npos)
        << e.what();
  }
  try {
    before.set_dtype_policy("bfloat16");
    ADD_FAILURE() << "bfloat16 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype policy 'bfloat16' (expected 'float32' or 'mixed_bfloat16')"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(mixed_precision::global_policy(), "float32");
}

// Four Gaussian blobs in 32 dimensions, 1,024 rows to train on and 512 to test.
struct Blobs {
  Tensor x, y, test_x, test_y;
};
Blobs blobs() {
  auto make = [](int64_t n, uint64_t seed) {
    Tensor x = testing::random_tensor({n, 32}, seed, -1.0f, 1.0f);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    float* v = x.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      int c = static_cast<int>(i % 4);
      labels[static_cast<size_t>(i)] = c;
      for (int64_t j = 0; j < 32; ++j) v[i * 32 + j] += (j % 4 == c ? 0.9f : 0.0f) + (j < 8 && c >= 2 ? 0.3f : 0.0f);
    }
    return std::pair{x, Tensor::from_vector({n}, std::span<const int32_t>(labels))};
  };
  auto [x, y] = make(1024, 7);
  auto [tx, ty] = make(512, 8);
  return {x, y, tx, ty};
}

TEST(MixedPrecision, AnMlpTrainsToWithinAPointOfFloat32) {
  Blobs d = blobs();
  auto train = [&](const std::string& policy) {
    GlobalPolicy scope(policy);
    Sequential m(SequentialOptions{.seed = 11});
    m.add(Dense(128, "relu", {.input_shape = Shape{32}}));
    m.add(Dense(64, "relu"));
    m.add(Dense(4, "softmax"));
    m.compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), "sparse_categorical_crossentropy", {"accuracy"});
    m.fit(d.x, d.y, {.epochs = 4, .batch_size = 32, .verbose = 0});
    auto scores = m.evaluate(d.test_x, d.test_y, {.verbose = 0});
    std::vector<float> weights;
    for (Variable* v : m.variables()) {
      auto values = v->value.to_vector();
      weights.insert(weights.end(), values.begin(), values.end());
    }
    return std::pair{log_value(scores, "accuracy"), weights};
  };
  auto [plain, plain_weights] = train("float32");
  auto [mixed, mixed_weights] = train("mixed_bfloat16");
  EXPECT_GT(plain, 0.9) << "the blobs are separable";
  EXPECT_NEAR(mixed, plain, 0.01) << "test accuracy, mixed_bfloat16 against float32";
  if (ops::has_bf16_products(Device::cpu())) EXPECT_NE(mixed_weights, plain_weights) << "the policy changed no product";
  else EXPECT_EQ(mixed_weights, plain_weights) << "without bf16 instructions the products stay float32";
}

}  // namespace
}  // namespace tandem
