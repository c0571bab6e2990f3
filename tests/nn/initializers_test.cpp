// Initializers with Keras' arguments: each fills with the mean and spread Keras' formula gives,
// and bad names, arguments and values are errors naming the layer.
#include <cmath>

#include "tandem/initializers.h"
#include "test_util.h"

namespace tandem {
namespace {

struct Moments {
  double mean, variance, min, max;
};
Moments moments(const InitializerSpec& spec, int64_t fan_in, int64_t fan_out) {
  Initializer init = Initializer::parse(spec, "layer \"x\"");
  Tensor t = Tensor::empty({fan_in, fan_out});
  init.fill(t, fan_in, fan_out, Philox(3));
  double sum = 0, squares = 0, lo = 1e30, hi = -1e30;
  for (float v : t.to_vector()) {
    sum += v;
    squares += static_cast<double>(v) * v;
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
  }
  double n = static_cast<double>(t.numel()), mean = sum / n;
  return {mean, squares / n - mean * mean, lo, hi};
}

// Issue 11, item 5: Keras' VarianceScaling in each mode and distribution (its variance is
// scale / fan), and the arguments of RandomNormal, TruncatedNormal, RandomUniform and Constant.
TEST(Initializers, KerasArgumentsGiveKerasDistributions) {
  const int64_t in = 300, out = 200;
  for (auto [mode, fan] : {std::pair{"fan_in", 300.0}, std::pair{"fan_out", 200.0}, std::pair{"fan_avg", 250.0}})
    for (const char* distribution : {"truncated_normal", "untruncated_normal", "uniform"}) {
      Moments m =
          moments({"variance_scaling", {{"scale", "2.0"}, {"mode", mode}, {"distribution", distribution}}}, in, out);
      EXPECT_NEAR(m.mean, 0.0, 0.003) << mode << " " << distribution;
      EXPECT_NEAR(m.variance, 2.0 / fan, 0.04 * 2.0 / fan) << mode << " " << distribution;
      if (std::string(distribution) == "uniform") EXPECT_LE(m.max, std::sqrt(3.0 * 2.0 / fan) + 1e-6);
      if (std::string(distribution) == "truncated_normal") EXPECT_LE(m.max, 2.0 * std::sqrt(2.0 / fan) / 0.8796 + 1e-6);
    }
  Moments normal = moments({"random_normal", {{"mean", "1.5"}, {"stddev", "0.2"}}}, in, out);
  EXPECT_NEAR(normal.mean, 1.5, 0.003);
  EXPECT_NEAR(std::sqrt(normal.variance), 0.2, 0.004);
  Moments truncated = moments({"truncated_normal", {{"mean", "-1"}, {"stddev", "0.1"}}}, in, out);
  EXPECT_NEAR(truncated.mean, -1.0, 0.003);
  EXPECT_GE(truncated.min, -1.2 - 1e-6);
  EXPECT_LE(truncated.max, -0.8 + 1e-6);
  Moments uniform = moments({"random_uniform", {{"minval", "2"}, {"maxval", "3"}}}, in, out);
  EXPECT_GE(uniform.min, 2.0);
  EXPECT_LE(uniform.max, 3.0);
  EXPECT_NEAR(uniform.mean, 2.5, 0.005);
  Moments constant = moments({"constant", {{"value", "0.25"}}}, in, out);
  EXPECT_EQ(constant.min, 0.25);
  EXPECT_EQ(constant.max, 0.25);
  // VarianceScaling(1, fan_avg, uniform) is Glorot's uniform.
  Moments glorot = moments("glorot_uniform", in, out),
          same = moments({"variance_scaling", {{"mode", "fan_avg"}, {"distribution", "uniform"}}}, in, out);
  EXPECT_NEAR(glorot.variance, same.variance, 1e-9);
}

TEST(Initializers, BadNamesArgumentsAndValuesNameTheLayer) {
  EXPECT_TRUE(testing::throws_error([] { Initializer::parse("bogus", "Dense \"d\""); },
                                    {"Dense \"d\": unknown initializer \"bogus\""}));
  EXPECT_TRUE(testing::throws_error(
      [] {
        Initializer::parse({"random_normal", {{"stdev", "1"}}}, "Dense \"d\"");
      },
      {"Dense \"d\": initializer random_normal takes no argument \"stdev\""}));
  EXPECT_TRUE(testing::throws_error(
      [] {
        Initializer::parse({"variance_scaling", {{"mode", "fan_max"}}}, "Conv2D \"c\"");
      },
      {"argument \"mode\" is \"fan_max\""}));
  EXPECT_TRUE(testing::throws_error(
      [] {
        Initializer::parse({"variance_scaling", {{"scale", "-1"}}}, "Conv2D \"c\"");
      },
      {"needs a positive scale"}));
  EXPECT_TRUE(testing::throws_error(
      [] {
        Initializer::parse({"random_uniform", {{"minval", "nan"}}}, "x");
      },
      {"finite number"}));
  EXPECT_TRUE(testing::throws_error(
      [] {
        Initializer::parse({"he_normal", {{"scale", "2"}}}, "x");
      },
      {"takes no argument \"scale\""}));
}

}  // namespace
}  // namespace tandem
