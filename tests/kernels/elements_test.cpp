// The shared per-element functions (src/kernels/elements.h), called one element at a time on the
// host, against the CPU's kernels: Philox, dropout masks, bf16 rounding and im2col against the
// CPU's own generator, rounding and convolution; the families whose CPU loops call these
// functions, to the same bits in every vector lane and tail at each vector level (the test runs
// again capped to AVX2). What the CUDA kernels compute is these functions. Runs without a GPU.
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/elements.h"
#include "tandem/random.h"
#include "test_util.h"

namespace tandem {
namespace {

namespace el = kernels::elements;
using kernels::BinaryKind;
using kernels::PointwiseLoss;
using kernels::UnaryKind;

// The same bits, -0 told from +0; any NaN for a NaN (its sign and payload are the hardware's).
::testing::AssertionResult same(float a, float b) {
  if ((std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " (0x" << std::hex << std::bit_cast<uint32_t>(a) << ") against " << b
                                       << " (0x" << std::bit_cast<uint32_t>(b) << ")";
}

std::vector<float> values(int64_t n, uint64_t seed, float low = -4.0f, float high = 4.0f) {
  return testing::random_tensor({n}, seed, low, high).to_vector();
}

TEST(Elements, TheEnumsAreTheCpuKernels) {
  EXPECT_EQ(el::kClip, static_cast<int>(UnaryKind::Clip));
  EXPECT_EQ(el::kAbs, static_cast<int>(UnaryKind::Abs));
  EXPECT_EQ(el::kMul, static_cast<int>(BinaryKind::Mul));
  EXPECT_EQ(el::kSoftmax, static_cast<int>(Activation::Softmax));
  EXPECT_EQ(el::kGELU, static_cast<int>(Activation::GELU));
  EXPECT_EQ(el::kBinaryCrossEntropy, static_cast<int>(PointwiseLoss::BinaryCrossEntropy));
}

TEST(Elements, PhiloxWordsAreTheCpuGenerator) {
  for (uint64_t seed : {0ull, 7ull, 0xDEADBEEFCAFEull})
    for (uint64_t stream : {0ull, 3ull, 1ull << 40}) {
      Philox rng(seed, stream);
      for (uint64_t index : {0ull, 1ull, 2ull, 3ull, 4ull, 1001ull, (1ull << 33) + 5})
        EXPECT_EQ(el::philox_word(seed, stream, index), rng.bits(index)) << seed << " " << stream << " " << index;
      EXPECT_EQ(el::philox_uniform(seed, stream, 77), rng.uniform(77));
    }
}

TEST(Elements, DropoutMasksAreTheCpuMasks) {
  const int64_t rows = 3, per_sample = 37, features = 80, feature_offset = 5, sample_offset = 11;
  std::vector<float> x = values(rows * per_sample, 1), y(x.size()), mask(x.size());
  kernels::cpu::dropout(x.data(), y.data(), mask.data(), rows, per_sample, 0.3f, 42, 9, sample_offset, features,
                        feature_offset);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < per_sample; ++j)
      EXPECT_EQ(el::dropout_mask(42, 9, sample_offset, r, features, feature_offset, j, 0.3f),
                mask[static_cast<size_t>(r * per_sample + j)]);
}

TEST(Elements, UnaryAndBinaryAreTheCpuKernels) {
  std::vector<float> x = values(64, 2, 0.1f, 3.0f), g = values(64, 3), b = values(8, 4), y(64), d(64);
  x[5] = std::numeric_limits<float>::quiet_NaN();  // clip keeps a NaN, as std::min(std::max(…)) does
  for (UnaryKind kind : {UnaryKind::Scale, UnaryKind::Square, UnaryKind::Log, UnaryKind::Clip, UnaryKind::Abs}) {
    kernels::cpu::unary(kind, x.data(), y.data(), 64, 0.5f, 0.5f, 2.0f);
    kernels::cpu::unary_backward(kind, x.data(), g.data(), d.data(), 64, 0.5f, 0.5f, 2.0f);
    for (size_t i = 0; i < 64; ++i) {
      EXPECT_TRUE(same(el::unary(static_cast<int>(kind), x[i], 0.5f, 0.5f, 2.0f), y[i])) << static_cast<int>(kind);
      EXPECT_TRUE(same(el::unary_backward(static_cast<int>(kind), x[i], g[i], 0.5f, 0.5f, 2.0f), d[i]));
    }
  }
  for (BinaryKind kind : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul}) {
    kernels::cpu::binary(kind, x.data(), b.data(), y.data(), 64, 8);
    for (size_t i = 0; i < 64; ++i) EXPECT_TRUE(same(el::binary(static_cast<int>(kind), x[i], b[i % 8]), y[i]));
  }
}

TEST(Elements, ActivationsAndTheirGradientsAreTheCpuKernels) {
  const int64_t rows = 4, cols = 33;  // not a whole vector: the CPU's scalar tails too
  std::vector<float> z = values(rows * cols, 5), bias = values(cols, 6), dy = values(rows * cols, 7);
  z[1] = std::numeric_limits<float>::quiet_NaN();  // kept a NaN, as the CPU keeps it
  z[2] = -0.0f;
  bias[2] = -0.0f;  // -0 + -0: ReLU's max(-0, 0) is -0 on the CPU
  for (Activation act : {Activation::Linear, Activation::ReLU, Activation::ELU, Activation::SELU, Activation::Tanh,
                         Activation::Sigmoid, Activation::GELU}) {
    std::vector<float> y = z, dz(z.size());
    kernels::cpu::bias_activation(y.data(), bias.data(), rows, cols, act);
    std::vector<float> pre(z.size());
    for (size_t i = 0; i < z.size(); ++i) pre[i] = z[i] + bias[i % cols];
    kernels::cpu::activation_backward(dy.data(), pre.data(), y.data(), dz.data(), rows, cols, act);
    for (size_t i = 0; i < z.size(); ++i) {
      EXPECT_TRUE(same(el::activation(static_cast<int>(act), pre[i]), y[i]))
          << activation_name(act) << " at " << pre[i];
      EXPECT_TRUE(same(el::activation_backward(static_cast<int>(act), dy[i], pre[i], y[i]), dz[i]))
          << activation_name(act) << " at " << pre[i];
    }
  }
  // Softmax, a row at a time.
  std::vector<float> row = values(cols, 8), p(cols), q(cols);
  float log_z = kernels::cpu::softmax_row(row.data(), cols, p.data());
  EXPECT_EQ(el::softmax_row(row.data(), cols, q.data()), log_z);
  EXPECT_EQ(q, p);
}

TEST(Elements, PointwiseLossesAreTheCpuKernels) {
  const int64_t rows = 3, per_row = 17;
  std::vector<float> probs = values(rows * per_row, 9, 0.0f, 1.0f), logits = values(rows * per_row, 10),
                     t = values(rows * per_row, 11, 0.0f, 1.0f), dy = values(rows, 12);
  probs[3] = 0.0f;  // clipped to ε
  for (PointwiseLoss kind :
       {PointwiseLoss::SquaredError, PointwiseLoss::BinaryCrossEntropyLogits, PointwiseLoss::BinaryCrossEntropy}) {
    const std::vector<float>& p = kind == PointwiseLoss::BinaryCrossEntropyLogits ? logits : probs;
    std::vector<float> loss(rows), d(p.size());
    kernels::cpu::pointwise_loss(kind, p.data(), t.data(), loss.data(), rows, per_row);
    kernels::cpu::pointwise_loss_backward(kind, p.data(), t.data(), dy.data(), d.data(), rows, per_row);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int64_t j = r * per_row; j < (r + 1) * per_row; ++j) {
        auto k = static_cast<size_t>(j);
        s += el::pointwise_term(static_cast<int>(kind), p[k], t[k]);
        EXPECT_EQ(el::pointwise_gradient(static_cast<int>(kind), p[k], t[k], dy[static_cast<size_t>(r)], per_row),
                  d[k]);
      }
      EXPECT_EQ(static_cast<float>(s / per_row), loss[static_cast<size_t>(r)]) << static_cast<int>(kind);
    }
  }
}

TEST(Elements, OptimizerUpdatesAreTheCpuKernels) {
  const int64_t n = 41;
  std::vector<float> w0 = values(n, 13), g = values(n, 14), s0 = values(n, 15, 0.1f, 1.0f), v0 = values(n, 16);
  auto expect_same = [&](const char* name, auto cpu, auto element) {
    std::vector<float> w = w0, s = s0, v = v0, w2 = w0, s2 = s0, v2 = v0;
    cpu(w.data(), s.data(), v.data());
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) element(w2[i], g[i], s2[i], v2[i]);
    EXPECT_EQ(w2, w) << name;
    EXPECT_EQ(s2, s) << name;
    EXPECT_EQ(v2, v) << name;
  };
  for (bool nesterov : {false, true})
    expect_same(
        "sgd", [&](float* w, float*, float* v) { kernels::cpu::sgd_update(w, g.data(), v, n, 0.1f, 0.9f, nesterov); },
        [&](float& w, float gi, float&, float& v) { el::sgd_momentum(w, gi, v, 0.1f, 0.9f, nesterov); });
  expect_same(
      "plain sgd",
      [&](float* w, float*, float*) { kernels::cpu::sgd_update(w, g.data(), nullptr, n, 0.1f, 0.0f, false); },
      [&](float& w, float gi, float&, float&) { el::sgd(w, gi, 0.1f); });
  expect_same(
      "adam",
      [&](float* w, float* m, float* v) {
        kernels::cpu::adam_update(w, g.data(), v, m, n, 0.01f, 0.9f, 0.999f, 1e-7f, 3);
      },
      [&](float& w, float gi, float& m, float& v) {
        el::adam(w, gi, v, m, el::adam_alpha(0.01f, 0.9f, 0.999f, 3), 0.9f, 0.999f, 1e-7f);
      });
  expect_same(
      "rmsprop",
      [&](float* w, float* ms, float* v) {
        kernels::cpu::rmsprop_update(w, g.data(), ms, v, n, 0.01f, 0.9f, 0.5f, 1e-7f);
      },
      [&](float& w, float gi, float& ms, float& v) { el::rmsprop(w, gi, ms, &v, 0.01f, 0.9f, 0.5f, 1e-7f); });
  expect_same(
      "adagrad", [&](float* w, float* a, float*) { kernels::cpu::adagrad_update(w, g.data(), a, n, 0.1f, 1e-7f); },
      [&](float& w, float gi, float& a, float&) { el::adagrad(w, gi, a, 0.1f, 1e-7f); });
}

TEST(Elements, Bf16RoundingIsTheCpus) {
  std::vector<float> x = values(200, 17, -1e4f, 1e4f);
  x.push_back(std::bit_cast<float>(0x3f808000u));  // a tie, to even (down)
  x.push_back(std::bit_cast<float>(0x3f818000u));  // a tie, to even (up)
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(std::numeric_limits<float>::infinity());
  std::vector<uint16_t> y(x.size());
  kernels::cpu::round_to_bf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(el::to_bf16(x[i]), y[i]) << x[i];
}

// The CUDA device's convolutions are products of the im2col matrix these index functions read; here,
// on the host, those products (in double) against the CPU's convolution, forward and both gradients.
TEST(Elements, Im2colProductsAreTheCpusConvolution) {
  struct Case {
    int64_t n, h, w, c, k, f, stride;
    Padding padding;
  };
  for (Case t : {Case{2, 6, 7, 3, 3, 4, 1, Padding::Same}, Case{2, 7, 6, 2, 3, 5, 2, Padding::Same},
                 Case{1, 8, 8, 3, 3, 2, 2, Padding::Valid}, Case{2, 5, 5, 4, 1, 3, 1, Padding::Valid},
                 Case{1, 9, 7, 1, 5, 2, 3, Padding::Same}}) {
    auto s = kernels::conv2d_shape(t.n, t.h, t.w, t.c, t.k, t.k, t.f, t.stride, t.stride, t.padding);
    el::ConvGeometry g{s.h, s.w, s.c, s.kh, s.kw, s.sh, s.sw, s.pad_top, s.pad_left, s.oh, s.ow};
    int64_t rows = s.n * s.oh * s.ow, window = s.kh * s.kw * s.c;
    std::vector<float> x = values(s.n * s.h * s.w * s.c, 1), kernel = values(window * s.f, 2),
                       dy = values(rows * s.f, 3);
    std::vector<double> cols(static_cast<size_t>(rows * window));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < window; ++k) {
        int64_t from = el::im2col_source(g, r, k);
        cols[r * window + k] = from < 0 ? 0.0 : x[from];
      }
    std::vector<float> y(static_cast<size_t>(rows * s.f)), dx(x.size()), dk(kernel.size());
    kernels::cpu::conv2d_forward(s, x.data(), kernel.data(), nullptr, y.data());
    kernels::cpu::conv2d_backward_data(s, dy.data(), kernel.data(), dx.data());
    kernels::cpu::conv2d_backward_weights(s, x.data(), dy.data(), dk.data(), nullptr);
    std::vector<double> want_y(y.size()), want_dk(dk.size()), want_dx(dx.size()), dcols(cols.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < window; ++k)
        for (int64_t f = 0; f < s.f; ++f) {
          want_y[r * s.f + f] += cols[r * window + k] * kernel[k * s.f + f];
          want_dk[k * s.f + f] += cols[r * window + k] * dy[r * s.f + f];
          dcols[r * window + k] += dy[r * s.f + f] * kernel[k * s.f + f];
        }
    for (int64_t e = 0; e < static_cast<int64_t>(x.size()); ++e)
      el::im2col_readers(g, e, [&](int64_t r, int64_t k) { want_dx[e] += dcols[r * window + k]; });
    auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    EXPECT_TRUE(testing::all_close(as_double(y), want_y, 1e-4, 1e-5)) << "forward, case of width " << t.w;
    EXPECT_TRUE(testing::all_close(as_double(dx), want_dx, 1e-4, 1e-5)) << "input gradient, case of width " << t.w;
    EXPECT_TRUE(testing::all_close(as_double(dk), want_dk, 1e-4, 1e-5)) << "kernel gradient, case of width " << t.w;
  }
}

}  // namespace
}  // namespace tandem
