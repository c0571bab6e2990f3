// Every method of kernels::Backend (src/kernels/backend.h, read here so that a new method without a
// case fails) on every registered backend, against the CPU's on the same inputs: the emulated
// device and, where there is a GPU, CUDA (ggml's test-backend-ops does the same for its devices).
// The CPU's kernels are checked against naive references in kernels_test.cpp and the op tests; a
// new device gets this table for free. A backend with one method broken on purpose is caught.
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "cuda/gpu_test.h"
#include "emulated_device.h"
#include "test_util.h"

namespace tandem {
namespace {

using kernels::Backend;
using Outputs = std::vector<std::vector<double>>;

// One backend and its device, with the inputs a case needs made there.
struct On {
  Backend& b;
  Device d;
  Tensor values(const std::vector<float>& v) const {
    return Tensor::from_vector({static_cast<int64_t>(v.size())}, std::span<const float>(v)).to(d);
  }
  Tensor random(int64_t n, uint64_t seed, float low = -1.0f, float high = 1.0f) const {
    std::vector<float> v(static_cast<size_t>(n));
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (float& x : v) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x = low + (high - low) * static_cast<float>((s >> 40) & 0xFFFFFF) / static_cast<float>(0x1000000);
    }
    return values(v);
  }
  Tensor zeros(int64_t n) const { return Tensor::zeros({n}, DType::Float32, d); }
  Tensor labels(const std::vector<int32_t>& v) const {
    return Tensor::from_vector({static_cast<int64_t>(v.size())}, std::span<const int32_t>(v)).to(d);
  }
};

float* f(const Tensor& t) { return t.buffer<float>(); }
std::vector<double> host(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  return {v.begin(), v.end()};
}
// A tensor used as raw device bytes (bf16 values, a pooling's workspace), read back bit for bit.
Tensor bytes(const On& on, size_t count) { return on.zeros(static_cast<int64_t>((count + 3) / 4 + 1)); }
std::vector<double> bits(const Tensor& t, size_t count) {
  Tensor h = t.to(Device::cpu());
  std::vector<uint8_t> raw(count);
  std::memcpy(raw.data(), h.data<float>(), count);
  return {raw.begin(), raw.end()};
}

struct Case {
  std::string method;
  std::function<Outputs(const On&)> run;
  bool compared = true;  // false: a capability or a size, which may differ by device
};

const kernels::Conv2dShape kConv = kernels::conv2d_shape(2, 6, 6, 2, 3, 3, 3, 1, 1, Padding::Same);
const kernels::Pool2dShape kPool =
    kernels::pool2d_shape(kernels::PoolKind::Max, 2, 6, 6, 3, 2, 2, 2, 2, Padding::Valid);

std::vector<Case> cases() {
  using kernels::BinaryKind, kernels::PointwiseLoss, kernels::UnaryKind;
  const std::vector<UnaryKind> unaries{UnaryKind::Scale, UnaryKind::Square, UnaryKind::Log, UnaryKind::Clip,
                                       UnaryKind::Abs};
  const std::vector<Activation> acts{Activation::Linear, Activation::ReLU,    Activation::ELU,  Activation::SELU,
                                     Activation::Tanh,   Activation::Sigmoid, Activation::GELU, Activation::Softmax};
  const std::vector<PointwiseLoss> losses{PointwiseLoss::SquaredError, PointwiseLoss::BinaryCrossEntropyLogits,
                                          PointwiseLoss::BinaryCrossEntropy};
  auto x_for = [](const On& on, UnaryKind k) { return on.random(13, 1, k == UnaryKind::Log ? 0.1f : -2.0f, 2.0f); };
  return {
      {"name", [](const On& on) { return Outputs{{static_cast<double>(!on.b.name().empty())}}; }},
      {"unary",
       [=](const On& on) {
         Outputs out;
         for (UnaryKind k : unaries) {
           Tensor x = x_for(on, k), y = on.zeros(13);
           on.b.unary(k, f(x), f(y), 13, 0.5f, -0.5f, 0.75f);
           out.push_back(host(y));
         }
         return out;
       }},
      {"unary_backward",
       [=](const On& on) {
         Outputs out;
         for (UnaryKind k : unaries) {
           Tensor x = x_for(on, k), dy = on.random(13, 2), dx = on.zeros(13);
           on.b.unary_backward(k, f(x), f(dy), f(dx), 13, 0.5f, -0.5f, 0.75f);
           out.push_back(host(dx));
         }
         return out;
       }},
      {"binary",
       [](const On& on) {
         Outputs out;
         for (BinaryKind k : {BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul}) {
           Tensor a = on.random(12, 3), b = on.random(4, 4), y = on.zeros(12);
           on.b.binary(k, f(a), f(b), f(y), 12, 4);  // b repeated along a's rows
           out.push_back(host(y));
         }
         return out;
       }},
      {"sum", [](const On& on) { return Outputs{{on.b.sum(f(on.random(1000, 5)), 1000)}}; }},
      {"dropout",
       [](const On& on) {
         Tensor x = on.random(12, 6), y = on.zeros(12), mask = on.zeros(12);
         on.b.dropout(f(x), f(y), f(mask), 3, 4, 0.3f, 9, 2, 5, 4, 0);
         return Outputs{host(y), host(mask)};
       }},
      {"gemm",
       [](const On& on) {
         Outputs out;
         for (bool t : {false, true}) {
           Tensor a = on.random(15, 7), b = on.random(20, 8), c = on.random(12, 9);
           on.b.gemm(t, t, 3, 4, 5, 0.5f, f(a), t ? 3 : 5, f(b), t ? 5 : 4, 1.0f, f(c), 4);
           out.push_back(host(c));
         }
         return out;
       }},
      {"gemm_bf16",
       [](const On& on) {
         if (!on.b.has_bf16_products()) return Outputs{};
         Tensor a = on.random(15, 7), b = on.random(20, 8), c = on.zeros(12);
         on.b.gemm_bf16(false, false, 3, 4, 5, 1.0f, f(a), 5, f(b), 4, 0.0f, f(c), 4);
         return Outputs{host(c)};
       }},
      {"has_bf16_products", [](const On& on) { return Outputs{{static_cast<double>(on.b.has_bf16_products())}}; },
       false},
      {"round_bf16",
       [](const On& on) {
         Tensor x = on.random(15, 10, -100.0f, 100.0f), y = bytes(on, 30);
         on.b.round_bf16(f(x), 5, 3, 5, reinterpret_cast<uint16_t*>(f(y)));
         return Outputs{bits(y, 30)};
       }},
      {"gemm_bf16_rounded",
       [](const On& on) {
         if (!on.b.has_bf16_products()) return Outputs{};
         Tensor a = on.random(15, 7), b = on.random(20, 8), a16 = bytes(on, 30), b16 = bytes(on, 40), c = on.zeros(12);
         on.b.round_bf16(f(a), 5, 3, 5, reinterpret_cast<uint16_t*>(f(a16)));
         on.b.round_bf16(f(b), 4, 5, 4, reinterpret_cast<uint16_t*>(f(b16)));
         on.b.gemm_bf16_rounded(false, false, 3, 4, 5, reinterpret_cast<const uint16_t*>(f(a16)),
                                reinterpret_cast<const uint16_t*>(f(b16)), f(c), 4);
         return Outputs{host(c)};
       }},
      {"gemm_tn_ordered",
       [](const On& on) {
         Tensor a = on.random(15, 7), b = on.random(20, 8), c = on.random(12, 9);
         on.b.gemm_tn_ordered(3, 4, 5, f(a), 3, f(b), 4, true, f(c), 4);
         return Outputs{host(c)};
       }},
      {"gemm_ordered",
       [](const On& on) {
         Tensor a = on.random(15, 7), b = on.random(20, 8), c = on.zeros(12);
         on.b.gemm_ordered(true, 3, 4, 5, f(a), 5, f(b), 5, f(c), 4);
         return Outputs{host(c)};
       }},
      {"ordered_products_vectorised",
       [](const On& on) { return Outputs{{static_cast<double>(on.b.ordered_products_vectorised())}}; }, false},
      {"bias_activation",
       [=](const On& on) {
         Outputs out;
         for (Activation a : acts) {
           Tensor y = on.random(15, 11, -3.0f, 3.0f), bias = on.random(5, 12);
           on.b.bias_activation(f(y), f(bias), 3, 5, a);
           out.push_back(host(y));
         }
         return out;
       }},
      {"activation_backward",
       [=](const On& on) {
         Outputs out;
         for (Activation a : acts) {
           Tensor z = on.random(15, 11, -3.0f, 3.0f), y = z.clone(), dy = on.random(15, 13), dz = on.zeros(15);
           on.b.bias_activation(f(y), f(on.zeros(5)), 3, 5, a);
           on.b.activation_backward(f(dy), f(z), f(y), f(dz), 3, 5, a);
           out.push_back(host(dz));
         }
         return out;
       }},
      {"copy_blocks",
       [](const On& on) {
         Tensor x = on.random(40, 21), y = on.zeros(60);
         on.b.copy_blocks(f(x), f(y), 2, 3, 4, 20, 5, 30, 8);
         return Outputs{host(y)};
       }},
      {"column_sums",
       [](const On& on) {
         Tensor dy = on.random(15, 14), db = on.zeros(3);
         on.b.column_sums(f(dy), 5, 3, f(db));
         return Outputs{host(db)};
       }},
      {"sparse_softmax_cross_entropy",
       [](const On& on) {
         Tensor logits = on.random(20, 15, -3.0f, 3.0f), labels = on.labels({0, 4, 2, 1}), loss = on.zeros(4),
                p = on.zeros(20);
         on.b.sparse_softmax_cross_entropy(f(logits), labels.buffer<int32_t>(), 4, 5, f(loss), f(p));
         return Outputs{host(loss), host(p)};
       }},
      {"softmax_cross_entropy",
       [](const On& on) {
         Tensor logits = on.random(20, 15, -3.0f, 3.0f), targets = on.random(20, 16, 0.0f, 0.4f), loss = on.zeros(4),
                p = on.zeros(20);
         on.b.softmax_cross_entropy(f(logits), f(targets), 4, 5, f(loss), f(p));
         return Outputs{host(loss), host(p)};
       }},
      {"cross_entropy_backward",
       [](const On& on) {
         Tensor p = on.random(20, 17, 0.0f, 0.4f), labels = on.labels({0, 4, 2, 1}), targets = on.random(20, 16),
                dy = on.random(4, 18), sparse = on.zeros(20), dense = on.zeros(20);
         on.b.cross_entropy_backward(f(p), labels.buffer<int32_t>(), nullptr, f(dy), f(sparse), 4, 5);
         on.b.cross_entropy_backward(f(p), nullptr, f(targets), f(dy), f(dense), 4, 5);
         return Outputs{host(sparse), host(dense)};
       }},
      {"pointwise_loss",
       [=](const On& on) {
         Outputs out;
         for (PointwiseLoss k : losses) {
           Tensor pred = on.random(12, 19, 0.05f, 0.95f), target = on.random(12, 20, 0.0f, 1.0f), loss = on.zeros(3);
           on.b.pointwise_loss(k, f(pred), f(target), f(loss), 3, 4);
           out.push_back(host(loss));
         }
         return out;
       }},
      {"pointwise_loss_backward",
       [=](const On& on) {
         Outputs out;
         for (PointwiseLoss k : losses) {
           Tensor pred = on.random(12, 19, 0.05f, 0.95f), target = on.random(12, 20, 0.0f, 1.0f), dy = on.random(3, 21),
                  dpred = on.zeros(12);
           on.b.pointwise_loss_backward(k, f(pred), f(target), f(dy), f(dpred), 3, 4);
           out.push_back(host(dpred));
         }
         return out;
       }},
      {"channel_sums",
       [](const On& on) {
         std::vector<double> sums(3);
         on.b.channel_sums(f(on.random(18, 22)), 6, 3, sums.data());
         return Outputs{sums};
       }},
      {"squared_deviations",
       [](const On& on) {
         std::vector<double> sums(3);
         on.b.squared_deviations(f(on.random(18, 22)), f(on.random(3, 23)), 6, 3, sums.data());
         return Outputs{sums};
       }},
      {"batch_norm_backward_sums",
       [](const On& on) {
         std::vector<double> sums(6);
         on.b.batch_norm_backward_sums(f(on.random(18, 24)), f(on.random(18, 25)), 6, 3, sums.data());
         return Outputs{sums};
       }},
      {"batch_norm_normalize",
       [](const On& on) {
         Tensor x_hat = on.zeros(18), y = on.zeros(18);
         on.b.batch_norm_normalize(f(on.random(18, 22)), f(on.random(3, 23)), f(on.random(3, 26, 0.5f, 2.0f)),
                                   f(on.random(3, 27)), f(on.random(3, 28)), f(x_hat), f(y), 6, 3);
         return Outputs{host(x_hat), host(y)};
       }},
      {"batch_norm_input_gradient",
       [](const On& on) {
         std::vector<double> sums{0.5, -1.0, 2.0, 0.25, 1.5, -0.75};
         Tensor dx = on.zeros(18);
         on.b.batch_norm_input_gradient(f(on.random(18, 24)), f(on.random(18, 25)), f(on.random(3, 27)),
                                        f(on.random(3, 26, 0.5f, 2.0f)), sums.data(), 6.0, f(dx), 6, 3);
         return Outputs{host(dx)};
       }},
      {"scale_by_channels",
       [](const On& on) {
         Tensor dx = on.zeros(18);
         on.b.scale_by_channels(f(on.random(18, 24)), f(on.random(3, 27)), f(on.random(3, 26, 0.5f, 2.0f)), f(dx), 18,
                                3);
         return Outputs{host(dx)};
       }},
      {"moving_average",
       [](const On& on) {
         Tensor moving = on.random(3, 29);
         on.b.moving_average(f(moving), f(on.random(3, 30)), 3, 0.9f);
         return Outputs{host(moving)};
       }},
      {"conv2d_forward",
       [](const On& on) {
         Tensor y = on.zeros(2 * 6 * 6 * 3);
         on.b.conv2d_forward(kConv, f(on.random(144, 31)), f(on.random(54, 32)), f(on.random(3, 33)), f(y));
         return Outputs{host(y)};
       }},
      {"conv2d_backward_data",
       [](const On& on) {
         Tensor dx = on.zeros(144);
         on.b.conv2d_backward_data(kConv, f(on.random(216, 34)), f(on.random(54, 32)), f(dx));
         return Outputs{host(dx)};
       }},
      {"conv2d_backward_weights",
       [](const On& on) {
         Tensor dk = on.zeros(54), db = on.zeros(3);
         on.b.conv2d_backward_weights(kConv, f(on.random(144, 31)), f(on.random(216, 34)), f(dk), f(db));
         return Outputs{host(dk), host(db)};
       }},
      {"pool2d_workspace_bytes",
       [](const On& on) { return Outputs{{static_cast<double>(on.b.pool2d_workspace_bytes(kPool))}}; }, false},
      {"pool2d_forward",
       [](const On& on) {
         Outputs out;
         for (kernels::PoolKind kind : {kernels::PoolKind::Max, kernels::PoolKind::Average}) {
           kernels::Pool2dShape s = kPool;
           s.kind = kind;
           Tensor y = on.zeros(2 * 3 * 3 * 3), ws = bytes(on, on.b.pool2d_workspace_bytes(s));
           on.b.pool2d_forward(s, f(on.random(216, 35)), f(y), f(ws));
           out.push_back(host(y));
         }
         return out;
       }},
      {"pool2d_backward",
       [](const On& on) {
         Outputs out;
         for (kernels::PoolKind kind : {kernels::PoolKind::Max, kernels::PoolKind::Average}) {
           kernels::Pool2dShape s = kPool;
           s.kind = kind;
           Tensor y = on.zeros(54), ws = bytes(on, on.b.pool2d_workspace_bytes(s)), dx = on.zeros(216);
           on.b.pool2d_forward(s, f(on.random(216, 35)), f(y), f(ws));
           on.b.pool2d_backward(s, f(on.random(54, 36)), f(ws), f(dx));
           out.push_back(host(dx));
         }
         return out;
       }},
      {"conv2d_max_pool2d_forward",
       [](const On& on) {
         kernels::Conv2dShape conv = kConv;
         conv.fused_relu = true;
         Tensor p = on.zeros(54), ws = bytes(on, on.b.pool2d_workspace_bytes(kPool));
         on.b.conv2d_max_pool2d_forward(conv, kPool, f(on.random(144, 31)), f(on.random(54, 32)), f(on.random(3, 33)),
                                        f(p), f(ws));
         return Outputs{host(p)};
       }},
      {"conv2d_max_pool2d_backward",
       [](const On& on) {
         kernels::Conv2dShape conv = kConv;
         conv.fused_relu = true;
         Tensor x = on.random(144, 31), kernel = on.random(54, 32), p = on.zeros(54),
                ws = bytes(on, on.b.pool2d_workspace_bytes(kPool)), dx = on.zeros(144), dk = on.zeros(54),
                db = on.zeros(3);
         on.b.conv2d_max_pool2d_forward(conv, kPool, f(x), f(kernel), f(on.random(3, 33)), f(p), f(ws));
         on.b.conv2d_max_pool2d_backward(conv, kPool, f(x), f(kernel), f(p), f(ws), f(on.random(54, 36)), f(dx), f(dk),
                                         f(db));
         return Outputs{host(dx), host(dk), host(db)};
       }},
      {"sgd_update",
       [](const On& on) {
         Outputs out;
         for (bool nesterov : {false, true}) {
           Tensor w = on.random(7, 37), v = on.random(7, 38);
           on.b.sgd_update(f(w), f(on.random(7, 39)), f(v), 7, 0.1f, 0.9f, nesterov);
           out.push_back(host(w));
           out.push_back(host(v));
         }
         return out;
       }},
      {"adam_update",
       [](const On& on) {
         Tensor w = on.random(7, 37), m = on.random(7, 38), v = on.random(7, 40, 0.0f, 1.0f);
         on.b.adam_update(f(w), f(on.random(7, 39)), f(m), f(v), 7, 0.01f, 0.9f, 0.999f, 1e-7f, 3);
         return Outputs{host(w), host(m), host(v)};
       }},
      {"rmsprop_update",
       [](const On& on) {
         Tensor w = on.random(7, 37), ms = on.random(7, 40, 0.0f, 1.0f), v = on.random(7, 38);
         on.b.rmsprop_update(f(w), f(on.random(7, 39)), f(ms), f(v), 7, 0.01f, 0.9f, 0.5f, 1e-7f);
         return Outputs{host(w), host(ms), host(v)};
       }},
      {"adagrad_update",
       [](const On& on) {
         Tensor w = on.random(7, 37), acc = on.random(7, 40, 0.1f, 1.0f);
         on.b.adagrad_update(f(w), f(on.random(7, 39)), f(acc), 7, 0.1f, 1e-7f);
         return Outputs{host(w), host(acc)};
       }},
  };
}

// The methods of kernels::Backend, as its header declares them.
std::set<std::string> declared_methods() {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/src/kernels/backend.h");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> out;
  std::regex method(R"(virtual [^;(]*?\b(\w+)\()");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), method); it != std::sregex_iterator(); ++it)
    if ((*it)[1] != "Backend") out.insert((*it)[1]);
  return out;
}

// The methods whose outputs on `on` differ from the CPU's (relative 1e-4 and absolute 1e-5: a
// device's own reductions may order sums otherwise), or whose outputs have another shape.
std::vector<std::string> differing(const On& on) {
  std::vector<std::string> out;
  On cpu{kernels::cpu_backend(), Device::cpu()};
  for (const Case& c : cases()) {
    Outputs want = c.run(cpu), got = c.run(on);
    if (!c.compared) continue;
    bool same = want.size() == got.size();
    for (size_t i = 0; same && i < want.size(); ++i) {
      same = want[i].size() == got[i].size();
      for (size_t j = 0; same && j < want[i].size(); ++j)
        same = std::fabs(want[i][j] - got[i][j]) <= 1e-5 + 1e-4 * std::fabs(want[i][j]) ||
               (std::isnan(want[i][j]) && std::isnan(got[i][j]));
    }
    if (!same) out.push_back(c.method);
  }
  return out;
}

TEST(BackendTable, CoversEveryMethodOfTheBackend) {
  std::set<std::string> declared = declared_methods(), covered;
  ASSERT_GE(declared.size(), 40u) << "src/kernels/backend.h was not read";
  for (const Case& c : cases()) covered.insert(c.method);
  for (const std::string& m : declared) EXPECT_TRUE(covered.count(m)) << "kernels::Backend::" << m << " has no case";
  for (const std::string& m : covered) EXPECT_TRUE(declared.count(m)) << m << " is not a method of kernels::Backend";
}

TEST(BackendTable, TheEmulatedDeviceGivesTheCpusOutputs) {
  testing::EmulatedDevice device;
  EXPECT_EQ(differing({device.backend, testing::kEmulated}), std::vector<std::string>{});
  EXPECT_GT(device.backend.calls, 40) << "the emulated backend was not the one called";
}

TEST(BackendTable, AGpuGivesTheCpusOutputs) {
  TANDEM_SKIP_WITHOUT_GPU();
  Device gpu{Device::Kind::CUDA, 0};
  EXPECT_EQ(differing({kernels::backend(gpu), gpu}), std::vector<std::string>{});
}

// One method broken on purpose (a column's sum off by one) is the one the table names.
class BrokenColumnSums : public testing::CountingBackend {
 public:
  void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) override {
    testing::CountingBackend::column_sums(dy, rows, cols, db);
    db[0] += 1.0f;  // emulated memory is host memory
  }
};

TEST(BackendTable, ABackendWithOneMethodBrokenIsNamed) {
  testing::EmulatedDevice device;
  BrokenColumnSums broken;
  kernels::register_backend(Device::Kind::Emulated, &broken);
  std::vector<std::string> named = differing({broken, testing::kEmulated});
  kernels::register_backend(Device::Kind::Emulated, &device.backend);
  EXPECT_EQ(named, std::vector<std::string>{"column_sums"});
}

}  // namespace
}  // namespace tandem
