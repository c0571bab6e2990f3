// The device seam: a second device, emulated in host memory that the host may not read directly
// (Tensor::data fails on its tensors, as it would on a GPU's), with a backend that counts its
// calls and runs the CPU's kernels. Tensors reach the host only through to(Device::cpu()),
// to_vector() and item(); a training step of the mlp on it gives the CPU's bits, so no op on
// that path bypasses its device's kernels.
#include <cstdlib>
#include <cstring>

#include "core/device_memory.h"
#include "kernels/backend.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

const Device kEmulated{Device::Kind::Emulated, 0};

class EmulatedMemory : public core::DeviceMemory {
 public:
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* pointer, size_t) override { std::free(pointer); }
  void to_host(void* host, const void* device, size_t bytes) override { std::memcpy(host, device, bytes); }
  void from_host(void* device, const void* host, size_t bytes) override { std::memcpy(device, host, bytes); }
  bool host_accessible() const override { return false; }
};

// Every family forwards to the CPU's kernels and counts the call.
class CountingBackend : public kernels::Backend {
 public:
  int calls = 0;
  std::string name() const override { return "emulated"; }
  kernels::Backend& cpu() {
    ++calls;
    return kernels::cpu_backend();
  }
  void unary(kernels::UnaryKind k, const float* x, float* y, int64_t n, float f, float lo, float hi) override {
    cpu().unary(k, x, y, n, f, lo, hi);
  }
  void unary_backward(kernels::UnaryKind k, const float* x, const float* dy, float* dx, int64_t n, float f, float lo,
                      float hi) override {
    cpu().unary_backward(k, x, dy, dx, n, f, lo, hi);
  }
  void binary(kernels::BinaryKind k, const float* a, const float* b, float* y, int64_t n, int64_t b_n) override {
    cpu().binary(k, a, b, y, n, b_n);
  }
  double sum(const float* x, int64_t n) override { return cpu().sum(x, n); }
  void dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per, float rate, uint64_t seed,
               uint64_t step, int64_t offset) override {
    cpu().dropout(x, y, mask, rows, per, rate, seed, step, offset);
  }
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) override {
    cpu().gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) override {
    cpu().bias_activation(y, bias, rows, cols, act);
  }
  void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols,
                           Activation act) override {
    cpu().activation_backward(dy, z, y, dz, rows, cols, act);
  }
  void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) override {
    cpu().column_sums(dy, rows, cols, db);
  }
  void sparse_softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, float* loss,
                                    float* p) override {
    cpu().sparse_softmax_cross_entropy(logits, labels, rows, cols, loss, p);
  }
  void softmax_cross_entropy(const float* logits, const float* targets, int64_t rows, int64_t cols, float* loss,
                             float* p) override {
    cpu().softmax_cross_entropy(logits, targets, rows, cols, loss, p);
  }
  void cross_entropy_backward(const float* p, const int32_t* labels, const float* targets, const float* dy, float* dx,
                              int64_t rows, int64_t cols) override {
    cpu().cross_entropy_backward(p, labels, targets, dy, dx, rows, cols);
  }
  void pointwise_loss(kernels::PointwiseLoss k, const float* p, const float* t, float* loss, int64_t rows,
                      int64_t per_row) override {
    cpu().pointwise_loss(k, p, t, loss, rows, per_row);
  }
  void pointwise_loss_backward(kernels::PointwiseLoss k, const float* p, const float* t, const float* dy, float* dp,
                               int64_t rows, int64_t per_row) override {
    cpu().pointwise_loss_backward(k, p, t, dy, dp, rows, per_row);
  }
  void conv2d_forward(const kernels::Conv2dShape& s, const float* x, const float* k, const float* b,
                      float* y) override {
    cpu().conv2d_forward(s, x, k, b, y);
  }
  void conv2d_backward_data(const kernels::Conv2dShape& s, const float* dy, const float* k, float* dx) override {
    cpu().conv2d_backward_data(s, dy, k, dx);
  }
  void conv2d_backward_weights(const kernels::Conv2dShape& s, const float* x, const float* dy, float* dk,
                               float* db) override {
    cpu().conv2d_backward_weights(s, x, dy, dk, db);
  }
  size_t pool2d_workspace_bytes(const kernels::Pool2dShape& s) override { return cpu().pool2d_workspace_bytes(s); }
  void pool2d_forward(const kernels::Pool2dShape& s, const float* x, float* y, void* ws) override {
    cpu().pool2d_forward(s, x, y, ws);
  }
  void pool2d_backward(const kernels::Pool2dShape& s, const float* dy, const void* ws, float* dx) override {
    cpu().pool2d_backward(s, dy, ws, dx);
  }
  void sgd_update(float* w, const float* g, float* v, int64_t n, float lr, float momentum, bool nesterov) override {
    cpu().sgd_update(w, g, v, n, lr, momentum, nesterov);
  }
  void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                   int64_t step) override {
    cpu().adam_update(w, g, m, v, n, lr, b1, b2, eps, step);
  }
  void rmsprop_update(float* w, const float* g, float* ms, float* v, int64_t n, float lr, float rho, float momentum,
                      float eps) override {
    cpu().rmsprop_update(w, g, ms, v, n, lr, rho, momentum, eps);
  }
  void adagrad_update(float* w, const float* g, float* acc, int64_t n, float lr, float eps) override {
    cpu().adagrad_update(w, g, acc, n, lr, eps);
  }
};

class DeviceSeam : public ::testing::Test {
 protected:
  void SetUp() override {
    core::register_device_memory(Device::Kind::Emulated, &memory_);
    kernels::register_backend(Device::Kind::Emulated, &backend_);
  }
  void TearDown() override {
    kernels::register_backend(Device::Kind::Emulated, nullptr);
    core::register_device_memory(Device::Kind::Emulated, nullptr);
  }
  EmulatedMemory memory_;
  CountingBackend backend_;
};

TEST_F(DeviceSeam, TheHostReadsADeviceTensorOnlyThroughTheCopyPath) {
  Tensor host = Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor t = host.to(kEmulated);
  EXPECT_EQ(t.device(), kEmulated);
  EXPECT_TRUE(testing::throws_error([&] { (void)t.data<float>(); },
                                    {"float32 (2, 3) tensor lives on emulated:0", "to(Device::cpu())"}));
  EXPECT_EQ(t.to_vector(), host.to_vector());
  EXPECT_EQ(t.to(Device::cpu()).device(), Device::cpu());
  EXPECT_EQ(t.slice(1, 2).to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(t.row(1).clone().to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_FLOAT_EQ(t.slice(1, 2).reshape({3}).slice(2, 3).item(), 6.0f);
  Tensor z = Tensor::zeros({3}, DType::Float32, kEmulated);
  z.copy_from(host.row(0));
  EXPECT_EQ(z.to_vector(), (std::vector<float>{1, 2, 3}));
  z.fill(7.0f);
  EXPECT_EQ(z.to_vector(), (std::vector<float>{7, 7, 7}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        Tensor::empty({2}, DType::Float32, Device{Device::Kind::CUDA, 1});
      },
      {"device cuda:1 is not available"}));
}

TEST_F(DeviceSeam, AnOpOnTensorsOfTwoDevicesIsNamed) {
  Tensor a = testing::random_tensor({2, 3}, 1).to(kEmulated), b = testing::random_tensor({3, 4}, 2);
  EXPECT_TRUE(
      testing::throws_error([&] { ops::matmul(a, b); }, {"matmul: argument 'b' is on cpu, the op runs on emulated:0"}));
}

// The tutorial's mlp (Dense relu, Dropout, Dense softmax), Adam, sparse cross-entropy: a few
// steps on each device from the same weights and batches give the same bits.
TEST_F(DeviceSeam, AnMlpTrainingStepGivesTheCpuBits) {
  using namespace layers;
  auto make = [] {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
    m->add(Dense(16, "relu", {.input_shape = Shape{12}}));
    m->add(Dropout(0.25f));
    m->add(Dense(4, "softmax"));
    return m;
  };
  Tensor x = testing::random_tensor({10, 12}, 3);
  std::vector<int32_t> l{0, 1, 2, 3, 0, 1, 2, 3, 1, 2};
  Tensor y = Tensor::from_vector({10}, std::span<const int32_t>(l));
  auto train = [&](Sequential& model, Device device) {
    for (Variable* v : model.variables()) {
      v->value = v->value.to(device);
      mark_trainable(v->value, v->trainable);
    }
    optimizers::Adam adam(0.01f);
    Loss loss_fn = Loss::sparse_categorical_crossentropy();
    std::vector<float> losses;
    for (uint64_t step = 0; step < 3; ++step) {
      GradientTape tape;
      Tensor pred = model.call(x.to(device), CallContext{true, RandomKey{9, step, 0}});
      Tensor loss = ops::mean(loss_fn.per_sample(y.to(device), pred));
      std::vector<Variable*> vars = model.trainable_variables();
      adam.apply(vars, tape.gradient(loss, vars));
      losses.push_back(loss.item());
    }
    return losses;
  };
  auto on_cpu = make(), on_device = make();
  std::vector<float> cpu_losses = train(*on_cpu, Device::cpu());
  int before = backend_.calls;
  std::vector<float> device_losses = train(*on_device, kEmulated);
  EXPECT_GT(backend_.calls, before + 20) << "the step ran its kernels through the emulated device's backend";
  EXPECT_EQ(device_losses, cpu_losses);
  auto a = on_cpu->variables(), b = on_device->variables();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]->value.device(), kEmulated) << b[i]->name;
    EXPECT_EQ(b[i]->value.to_vector(), a[i]->value.to_vector()) << b[i]->name;
  }
}

}  // namespace
}  // namespace tandem
