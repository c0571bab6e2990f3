// One description per op: its input shapes, the op, and a naive double-precision reference.
// The harness checks the forward pass against the reference and the backward pass (through
// GradientTape) against central finite differences of the reference, in double precision, on
// every device: the CPU, the emulated device of emulated_device.h (whose memory the host may not
// read directly, so an op that bypasses its device's kernels fails there) and a GPU (cuda:0,
// ctest label `gpu`; skipped with the reason where there is none). Past 500 lines as one table: a
// case per op, which a new op joins.
#include <functional>
#include <optional>
#include <tuple>

#include "cuda/gpu_test.h"
#include "emulated_device.h"
#include "reference.h"
#include "tandem/autograd.h"
#include "test_util.h"

namespace tandem {
namespace {

using reference::Vec;
using Inputs = std::vector<Tensor>;
using RefInputs = std::vector<Vec>;

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const Inputs&)> op;
  std::function<Vec(const RefInputs&)> ref;
  float low = -1.0f, high = 1.0f;
  double forward_atol = 2e-5, forward_rtol = 1e-4;
  double grad_atol = 3e-4, grad_rtol = 3e-3;
  size_t differentiable = 99;  // inputs after this many are constants (loss targets)
  bool runs_kernels = true;    // false for views (reshape)
  // Why the op does not run on other devices yet (empty: it does).
  std::string cpu_only;
};

std::ostream& operator<<(std::ostream& os, const OpCase& c) { return os << c.name; }
}  // namespace
void PrintTo(const Device& d, std::ostream* os) { *os << d.name(); }
namespace {

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// An op case on one device (the emulated one registered for the test's time).
class OpTest : public ::testing::TestWithParam<std::tuple<OpCase, Device>> {
 protected:
  void SetUp() override {
    if (device().kind == Device::Kind::CPU) return;
    if (device().kind == Device::Kind::CUDA) TANDEM_SKIP_WITHOUT_GPU();
    if (!op_case().cpu_only.empty()) GTEST_SKIP() << op_case().name << " runs on the cpu only: " << op_case().cpu_only;
    if (device().kind == Device::Kind::Emulated) emulated_.emplace();
  }
  const OpCase& op_case() const { return std::get<0>(GetParam()); }
  Device device() const { return std::get<1>(GetParam()); }
  // The device's backend ran the op (the CPU's needs no count).
  void expect_device_kernels_ran() const {
    if (emulated_ && op_case().runs_kernels)
      EXPECT_GT(emulated_->backend.calls, 0) << op_case().name << ": no kernel of the emulated device ran";
  }

 private:
  std::optional<testing::EmulatedDevice> emulated_;
};

// Random inputs in the case's range, as tensors on `device` and as the same values in double.
void make_inputs(const OpCase& c, uint64_t seed, Device device, Inputs& inputs, RefInputs& ref_inputs) {
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    Tensor host = testing::random_tensor(c.shapes[i], seed + i, c.low, c.high);
    ref_inputs.push_back(testing::to_double(host));
    inputs.push_back(host.to(device));
  }
}

TEST_P(OpTest, ForwardMatchesReference) {
  const OpCase& c = op_case();
  Inputs inputs;
  RefInputs ref_inputs;
  make_inputs(c, 100, device(), inputs, ref_inputs);
  Tensor out = c.op(inputs);
  EXPECT_EQ(out.device(), device());
  EXPECT_TRUE(testing::all_close(out.to(Device::cpu()), c.ref(ref_inputs), c.forward_atol, c.forward_rtol)) << c.name;
  expect_device_kernels_ran();
}

TEST_P(OpTest, GradientMatchesFiniteDifferences) {
  const OpCase& c = op_case();
  Inputs inputs;
  RefInputs ref_inputs;
  make_inputs(c, 200, device(), inputs, ref_inputs);
  // Scalar objective L = Σ out ⊙ R with a fixed random R, so every output element matters.
  Vec probe = c.ref(ref_inputs);
  Tensor weights = testing::random_tensor(Shape{static_cast<int64_t>(probe.size())}, 300);
  Vec w = testing::to_double(weights);
  weights = weights.to(device());

  GradientTape tape;
  for (const Tensor& t : inputs) tape.watch(t);
  Tensor out = c.op(inputs);
  Tensor loss = ops::sum(ops::mul(ops::reshape(out, Shape{out.numel()}), weights));
  std::vector<Tensor> grads = tape.gradient(loss, inputs);

  const double h = 1e-5;
  for (size_t i = 0; i < std::min(inputs.size(), c.differentiable); ++i) {
    Vec numeric(ref_inputs[i].size());
    for (size_t k = 0; k < ref_inputs[i].size(); ++k) {
      RefInputs plus = ref_inputs, minus = ref_inputs;
      plus[i][k] += h;
      minus[i][k] -= h;
      numeric[k] = (dot(c.ref(plus), w) - dot(c.ref(minus), w)) / (2 * h);
    }
    EXPECT_EQ(grads[i].device(), device()) << c.name << " input " << i;
    EXPECT_TRUE(testing::all_close(grads[i].to(Device::cpu()), numeric, c.grad_atol, c.grad_rtol))
        << c.name << " input " << i;
  }
  expect_device_kernels_ran();
}

Vec ref_dense(const RefInputs& in, int64_t b, int64_t i, int64_t u, Activation a) {
  Vec z = reference::matmul(in[0], in[1], b, i, u, false, false);
  for (int64_t r = 0; r < b; ++r)
    for (int64_t j = 0; j < u; ++j) z[r * u + j] += in[2][j];
  return reference::activation(z, u, a);
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      int64_t m = 3, k = 5, n = 4;
      cases.push_back({fmt::format("matmul_t{}{}", int(ta), int(tb)),
                       {ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}},
                       [=](const Inputs& in) { return ops::matmul(in[0], in[1], ta, tb); },
                       [=](const RefInputs& in) { return reference::matmul(in[0], in[1], m, k, n, ta, tb); }});
    }
  for (Activation a : {Activation::Linear, Activation::ReLU, Activation::ELU, Activation::SELU, Activation::Tanh,
                       Activation::Sigmoid, Activation::GELU, Activation::Softmax}) {
    std::string an(activation_name(a));
    cases.push_back({"dense_" + an,
                     {{4, 6}, {6, 5}, {5}},
                     [=](const Inputs& in) { return ops::dense(in[0], in[1], in[2], a); },
                     [=](const RefInputs& in) { return ref_dense(in, 4, 6, 5, a); }});
    cases.push_back({"activation_" + an,
                     {{3, 7}},
                     [=](const Inputs& in) { return ops::activation(in[0], a); },
                     [=](const RefInputs& in) { return reference::activation(in[0], 7, a); },
                     -3.0f,
                     3.0f});
  }
  cases.push_back({"add",
                   {{3, 4}, {3, 4}},
                   [](const Inputs& in) { return ops::add(in[0], in[1]); },
                   [](const RefInputs& in) {
                     Vec y(12);
                     for (int i = 0; i < 12; ++i) y[i] = in[0][i] + in[1][i];
                     return y;
                   }});
  cases.push_back({"add_bias",
                   {{3, 4}, {4}},
                   [](const Inputs& in) { return ops::add(in[0], in[1]); },
                   [](const RefInputs& in) {
                     Vec y(12);
                     for (int i = 0; i < 12; ++i) y[i] = in[0][i] + in[1][i % 4];
                     return y;
                   }});
  cases.push_back({"sub_bias",
                   {{3, 4}, {4}},
                   [](const Inputs& in) { return ops::sub(in[0], in[1]); },
                   [](const RefInputs& in) {
                     Vec y(12);
                     for (int i = 0; i < 12; ++i) y[i] = in[0][i] - in[1][i % 4];
                     return y;
                   }});
  cases.push_back({"mul",
                   {{3, 4}, {3, 4}},
                   [](const Inputs& in) { return ops::mul(in[0], in[1]); },
                   [](const RefInputs& in) {
                     Vec y(12);
                     for (int i = 0; i < 12; ++i) y[i] = in[0][i] * in[1][i];
                     return y;
                   }});
  cases.push_back({"mul_bias",
                   {{3, 4}, {4}},
                   [](const Inputs& in) { return ops::mul(in[0], in[1]); },
                   [](const RefInputs& in) {
                     Vec y(12);
                     for (int i = 0; i < 12; ++i) y[i] = in[0][i] * in[1][i % 4];
                     return y;
                   }});
  cases.push_back({"scale",
                   {{5}},
                   [](const Inputs& in) { return ops::scale(in[0], -2.5f); },
                   [](const RefInputs& in) {
                     Vec y(5);
                     for (int i = 0; i < 5; ++i) y[i] = -2.5 * in[0][i];
                     return y;
                   }});
  cases.push_back({"square",
                   {{5}},
                   [](const Inputs& in) { return ops::square(in[0]); },
                   [](const RefInputs& in) {
                     Vec y(5);
                     for (int i = 0; i < 5; ++i) y[i] = in[0][i] * in[0][i];
                     return y;
                   }});
  // Moved to the host and back (on the cpu, both moves are the tensor itself): the gradient moves
  // back the same way.
  cases.push_back({"to_device",
                   {{2, 3}},
                   [](const Inputs& in) {
                     return ops::to_device(ops::square(ops::to_device(in[0], Device::cpu())), in[0].device());
                   },
                   [](const RefInputs& in) {
                     Vec y(6);
                     for (int i = 0; i < 6; ++i) y[i] = in[0][i] * in[0][i];
                     return y;
                   },
                   -1.0f,
                   1.0f,
                   2e-5,
                   1e-4,
                   3e-4,
                   3e-3,
                   99,
                   false});
  cases.push_back({"log",
                   {{6}},
                   [](const Inputs& in) { return ops::log(in[0]); },
                   [](const RefInputs& in) {
                     Vec y(6);
                     for (int i = 0; i < 6; ++i) y[i] = std::log(in[0][i]);
                     return y;
                   },
                   0.5f,
                   2.0f});
  cases.push_back({"clip",
                   {{8}},
                   [](const Inputs& in) { return ops::clip(in[0], -0.5f, 0.5f); },
                   [](const RefInputs& in) {
                     Vec y(8);
                     for (int i = 0; i < 8; ++i) y[i] = std::clamp(in[0][i], -0.5, 0.5);
                     return y;
                   }});
  cases.push_back({"abs",
                   {{8}},
                   [](const Inputs& in) { return ops::abs(in[0]); },
                   [](const RefInputs& in) {
                     Vec y(8);
                     for (int i = 0; i < 8; ++i) y[i] = std::fabs(in[0][i]);
                     return y;
                   }});
  cases.push_back({"penalty",  // a regularizer's: l1·Σ|x| + l2·Σx²
                   {{5}},
                   [](const Inputs& in) { return ops::penalty(in[0], {.l1 = 0.3f, .l2 = 0.7f}); },
                   [](const RefInputs& in) {
                     double s = 0;
                     for (double v : in[0]) s += 0.3 * std::fabs(v) + 0.7 * v * v;
                     return Vec{s};
                   }});
  cases.push_back({"row_penalties",  // an activity regularizer's, per row
                   {{3, 4}},
                   [](const Inputs& in) { return ops::row_penalties(in[0], {.l1 = 0.3f, .l2 = 0.7f}); },
                   [](const RefInputs& in) {
                     Vec y(3, 0.0);
                     for (int i = 0; i < 12; ++i) y[i / 4] += 0.3 * std::fabs(in[0][i]) + 0.7 * in[0][i] * in[0][i];
                     return y;
                   }});
  cases.push_back({"sum",
                   {{3, 4}},
                   [](const Inputs& in) { return ops::sum(in[0]); },
                   [](const RefInputs& in) {
                     double s = 0;
                     for (double v : in[0]) s += v;
                     return Vec{s};
                   }});
  cases.push_back({"mean",
                   {{3, 4}},
                   [](const Inputs& in) { return ops::mean(in[0]); },
                   [](const RefInputs& in) {
                     double s = 0;
                     for (double v : in[0]) s += v;
                     return Vec{s / 12};
                   }});
  cases.push_back({"reshape",
                   {{2, 6}},
                   [](const Inputs& in) {
                     return ops::reshape(in[0], {3, 4});
                   },
                   [](const RefInputs& in) { return in[0]; }});
  // Concatenation along an axis: inputs of (outer, along_i, inner), their rows side by side.
  auto concat_ref = [](const RefInputs& in, const std::vector<int64_t>& along, int64_t outer, int64_t inner) {
    Vec y;
    for (int64_t o = 0; o < outer; ++o)
      for (size_t i = 0; i < in.size(); ++i)
        for (int64_t k = 0; k < along[i] * inner; ++k)
          y.push_back(in[i][static_cast<size_t>(o * along[i] * inner + k)]);
    return y;
  };
  cases.push_back({"concat_last_axis",
                   {{2, 3, 2}, {2, 3, 1}, {2, 3, 3}},
                   [](const Inputs& in) { return ops::concat(in, -1); },
                   [=](const RefInputs& in) {
                     return concat_ref(in, {2, 1, 3}, 6, 1);
                   }});
  cases.push_back({"concat_five_on_axis_1",  // more inputs than one tape node takes
                   {{2, 1, 2}, {2, 2, 2}, {2, 1, 2}, {2, 1, 2}, {2, 3, 2}},
                   [](const Inputs& in) { return ops::concat(in, 1); },
                   [=](const RefInputs& in) {
                     return concat_ref(in, {1, 2, 1, 1, 3}, 2, 2);
                   }});
  cases.push_back({"columns",  // a model's packed inputs cut apart
                   {{3, 7}},
                   [](const Inputs& in) { return ops::columns(in[0], 2, 6); },
                   [](const RefInputs& in) {
                     Vec y;
                     for (int r = 0; r < 3; ++r)
                       for (int c = 2; c < 6; ++c) y.push_back(in[0][static_cast<size_t>(r * 7 + c)]);
                     return y;
                   }});
  cases.push_back({"zero_pad2d",
                   {{2, 3, 2, 2}},
                   [](const Inputs& in) { return ops::zero_pad2d(in[0], 1, 2, 0, 1); },
                   [](const RefInputs& in) {
                     Vec y(2 * 6 * 3 * 2, 0.0);
                     for (int b = 0; b < 2; ++b)
                       for (int h = 0; h < 3; ++h)
                         for (int w = 0; w < 2; ++w)
                           for (int c = 0; c < 2; ++c)
                             y[((b * 6 + h + 1) * 3 + w) * 2 + c] = in[0][((b * 3 + h) * 2 + w) * 2 + c];
                     return y;
                   }});

  static const std::vector<int32_t> labels{2, 0, 4, 1};
  cases.push_back({"sparse_softmax_cross_entropy",
                   {{4, 5}},
                   [](const Inputs& in) {
                     return ops::sparse_softmax_cross_entropy(
                         in[0], Tensor::from_vector({4}, std::span<const int32_t>(labels)));
                   },
                   [](const RefInputs& in) {
                     Vec y(4);
                     for (int r = 0; r < 4; ++r) y[r] = -reference::log_softmax_row(&in[0][r * 5], 5)[labels[r]];
                     return y;
                   },
                   -3.0f,
                   3.0f});
  cases.push_back({"softmax_cross_entropy",
                   {{4, 5}, {4, 5}},
                   [](const Inputs& in) { return ops::softmax_cross_entropy(in[0], in[1]); },
                   [](const RefInputs& in) {
                     Vec y(4, 0.0);
                     for (int r = 0; r < 4; ++r) {
                       Vec ls = reference::log_softmax_row(&in[0][r * 5], 5);
                       for (int j = 0; j < 5; ++j) y[r] -= in[1][r * 5 + j] * ls[j];
                     }
                     return y;
                   },
                   0.0f,
                   1.0f});
  cases.push_back({"binary_cross_entropy_logits",
                   {{3, 4}, {3, 4}},
                   [](const Inputs& in) { return ops::binary_cross_entropy(in[0], in[1], true); },
                   [](const RefInputs& in) {
                     Vec y(3, 0.0);
                     for (int i = 0; i < 12; ++i) {
                       double p = 1 / (1 + std::exp(-in[0][i]));
                       y[i / 4] -= (in[1][i] * std::log(p) + (1 - in[1][i]) * std::log(1 - p)) / 4;
                     }
                     return y;
                   },
                   0.05f,
                   0.95f});
  cases.push_back({"binary_cross_entropy_probabilities",
                   {{3, 4}, {3, 4}},
                   [](const Inputs& in) { return ops::binary_cross_entropy(in[0], in[1], false); },
                   [](const RefInputs& in) {
                     Vec y(3, 0.0);
                     for (int i = 0; i < 12; ++i)
                       y[i / 4] -= (in[1][i] * std::log(in[0][i]) + (1 - in[1][i]) * std::log(1 - in[0][i])) / 4;
                     return y;
                   },
                   0.05f,
                   0.95f});
  cases.push_back({"mean_squared_error",
                   {{3, 4}, {3, 4}},
                   [](const Inputs& in) { return ops::mean_squared_error(in[0], in[1]); },
                   [](const RefInputs& in) {
                     Vec y(3, 0.0);
                     for (int i = 0; i < 12; ++i) y[i / 4] += (in[0][i] - in[1][i]) * (in[0][i] - in[1][i]) / 4;
                     return y;
                   }});
  struct ConvCase {
    const char* name;
    int64_t h, w, kh, kw, sh, sw;
    Padding pad;
  };
  for (ConvCase cc : {ConvCase{"conv2d_valid", 6, 5, 3, 3, 1, 1, Padding::Valid},
                      ConvCase{"conv2d_same_stride2", 6, 5, 3, 2, 2, 2, Padding::Same},
                      ConvCase{"conv2d_same", 5, 5, 3, 3, 1, 1, Padding::Same}}) {
    auto g = reference::conv_geometry(2, cc.h, cc.w, 3, cc.kh, cc.kw, 4, cc.sh, cc.sw, cc.pad);
    cases.push_back({cc.name,
                     {{2, cc.h, cc.w, 3}, {cc.kh, cc.kw, 3, 4}, {4}},
                     [=](const Inputs& in) { return ops::conv2d(in[0], in[1], in[2], cc.sh, cc.sw, cc.pad); },
                     [=](const RefInputs& in) { return reference::conv2d(in[0], in[1], &in[2], g); }});
  }
  // Few input values per window and whole 16-filter blocks: Tandem's own loops
  // (kernels::cpu::conv2d_is_small), over 1 and 3 channels, strided, with ReLU, 48 filters (a block
  // of 2 and one of 1).
  struct SmallCase {
    const char* name;
    int64_t c, kh, f, stride;
    Activation act;
  };
  for (SmallCase sc : {SmallCase{"conv2d_small_grey", 1, 3, 16, 1, Activation::Linear},
                       SmallCase{"conv2d_small_rgb_strided_relu", 3, 3, 48, 2, Activation::ReLU},
                       SmallCase{"conv2d_small_5x5", 1, 5, 32, 1, Activation::ReLU}}) {
    auto g = reference::conv_geometry(2, 9, 11, sc.c, sc.kh, sc.kh, sc.f, sc.stride, sc.stride, Padding::Valid);
    cases.push_back({sc.name,
                     {{2, 9, 11, sc.c}, {sc.kh, sc.kh, sc.c, sc.f}, {sc.f}},
                     [=](const Inputs& in) {
                       return ops::conv2d(in[0], in[1], in[2], sc.stride, sc.stride, Padding::Valid, sc.act);
                     },
                     [=](const RefInputs& in) {
                       return reference::activation(reference::conv2d(in[0], in[1], &in[2], g), sc.f, sc.act);
                     }});
  }
  for (Activation a : {Activation::ReLU, Activation::ELU, Activation::GELU}) {
    auto g = reference::conv_geometry(2, 5, 5, 3, 3, 3, 4, 1, 1, Padding::Same);
    cases.push_back(
        {"conv2d_" + std::string(activation_name(a)),
         {{2, 5, 5, 3}, {3, 3, 3, 4}, {4}},
         [=](const Inputs& in) { return ops::conv2d(in[0], in[1], in[2], 1, 1, Padding::Same, a); },
         [=](const RefInputs& in) { return reference::activation(reference::conv2d(in[0], in[1], &in[2], g), 4, a); }});
  }
  struct PoolCase {
    const char* name;
    bool max;
    int64_t p, s;
    Padding pad;
  };
  for (PoolCase pc :
       {PoolCase{"max_pool_valid", true, 2, 2, Padding::Valid}, PoolCase{"max_pool_same_s1", true, 3, 1, Padding::Same},
        PoolCase{"avg_pool_valid", false, 2, 2, Padding::Valid}, PoolCase{"avg_pool_same", false, 3, 2, Padding::Same},
        PoolCase{"max_pool_tiling", true, 2, 2, Padding::Valid}}) {
    // The last: windows that tile the input (4 × 6) exactly, each value in one window.
    int64_t h = std::string(pc.name) == "max_pool_tiling" ? 4 : 5;
    auto g = reference::conv_geometry(2, h, 6, 3, pc.p, pc.p, 3, pc.s, pc.s, pc.pad);
    cases.push_back({pc.name,
                     {{2, h, 6, 3}},
                     [=](const Inputs& in) {
                       return pc.max ? ops::max_pool2d(in[0], pc.p, pc.p, pc.s, pc.s, pc.pad)
                                     : ops::avg_pool2d(in[0], pc.p, pc.p, pc.s, pc.s, pc.pad);
                     },
                     [=](const RefInputs& in) { return reference::pool2d(in[0], g, pc.max); }});
  }
  // The fused ReLU convolution and max pooling: non-overlapping windows, windows that tile the
  // input, overlapping ones over a padded input after a strided convolution, and a convolution of
  // Tandem's own loops (valid, 16 filters) under tiling windows.
  struct FusedCase {
    const char* name;
    int64_t w, f, conv_stride;
    Padding conv_pad;
    int64_t p, s;
    Padding pad;
  };
  for (FusedCase fc : {FusedCase{"conv2d_max_pool2d", 7, 4, 1, Padding::Same, 2, 2, Padding::Valid},
                       FusedCase{"conv2d_max_pool2d_tiling", 8, 4, 1, Padding::Same, 2, 2, Padding::Valid},
                       FusedCase{"conv2d_max_pool2d_overlapping", 7, 4, 2, Padding::Same, 3, 1, Padding::Same},
                       FusedCase{"conv2d_max_pool2d_small", 10, 16, 1, Padding::Valid, 2, 2, Padding::Valid}}) {
    auto conv = reference::conv_geometry(2, 6, fc.w, 3, 3, 3, fc.f, fc.conv_stride, fc.conv_stride, fc.conv_pad);
    auto pool = reference::conv_geometry(2, conv.oh, conv.ow, fc.f, fc.p, fc.p, fc.f, fc.s, fc.s, fc.pad);
    cases.push_back({fc.name,
                     {{2, 6, fc.w, 3}, {3, 3, 3, fc.f}, {fc.f}},
                     [=](const Inputs& in) {
                       return ops::conv2d_max_pool2d(in[0], in[1], in[2], fc.conv_stride, fc.conv_stride, fc.conv_pad,
                                                     fc.p, fc.p, fc.s, fc.s, fc.pad);
                     },
                     [=](const RefInputs& in) {
                       Vec y =
                           reference::activation(reference::conv2d(in[0], in[1], &in[2], conv), fc.f, Activation::ReLU);
                       return reference::pool2d(y, pool, true);
                     }});
  }
  for (bool training : {true, false}) {
    cases.push_back({training ? "batch_norm_training" : "batch_norm_inference",
                     {{6, 4}, {4}, {4}},
                     [=](const Inputs& in) {
                       Tensor mm = Tensor::full({4}, 0.1f, in[0].device()),
                              mv = Tensor::full({4}, 0.8f, in[0].device());
                       return ops::batch_norm(in[0], in[1], in[2], mm, mv, 0.9f, 1e-3f, training);
                     },
                     [=](const RefInputs& in) {
                       return reference::batch_norm(in[0], in[1], in[2], 4, 1e-3, training, Vec(4, 0.1f), Vec(4, 0.8f));
                     }});
  }
  cases.push_back({"dropout",
                   {{4, 16}},
                   [](const Inputs& in) {
                     return ops::dropout(in[0], 0.3f, RandomKey{11, 3, 5});
                   },
                   [](const RefInputs& in) {
                     // The mask is part of the op's contract: Philox(11, 3) at (5 + row)·16 + column.
                     Philox rng(11, 3);
                     Vec y(64);
                     for (int i = 0; i < 64; ++i) {
                       uint64_t index = static_cast<uint64_t>((5 + i / 16) * 16 + i % 16);
                       y[i] = rng.uniform(index) < 0.3f ? 0.0 : in[0][i] / (1.0 - 0.3f);
                     }
                     return y;
                   }});
  for (OpCase& c : cases) {
    if (c.name.find("cross_entropy") != std::string::npos || c.name == "mean_squared_error") c.differentiable = 1;
    if (c.name == "reshape") c.runs_kernels = false;
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpTest,
                         ::testing::Combine(::testing::ValuesIn(op_cases()),
                                            ::testing::Values(Device::cpu(), testing::kEmulated, Device::cuda(0))),
                         [](const ::testing::TestParamInfo<std::tuple<OpCase, Device>>& info) {
                           Device d = std::get<1>(info.param);
                           return std::get<0>(info.param).name + (d.kind == Device::Kind::CPU        ? "_cpu"
                                                                  : d.kind == Device::Kind::Emulated ? "_emulated"
                                                                                                     : "_cuda");
                         });

}  // namespace
}  // namespace tandem
