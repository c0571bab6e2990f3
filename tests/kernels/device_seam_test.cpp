// The device seam, proved with the emulated device of emulated_device.h. Tensors reach the host
// only through to(Device::cpu()), to_vector() and item(); training steps of the mlp, a cnn and a
// BatchNormalization model on it give the CPU's bits, so no op on those paths bypasses its
// device's kernels.
#include "emulated_device.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using testing::kEmulated;

class DeviceSeam : public ::testing::Test {
 protected:
  testing::EmulatedDevice device_;
  testing::CountingBackend& backend_ = device_.backend;
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
      {"cuda:1"}));  // not in this build, or no GPU, or no second one (tests/cuda/gpu_device_test.cpp)
}

// The seam's memory operations run on the device itself, as a GPU's would: zeros, full, fill, a
// clone, a copy between two tensors of the device and a move to another device of its kind send
// no byte through the host (the emulated memory counts its host transfers); only reads back do.
TEST_F(DeviceSeam, MemoryOperationsStayOnTheDevice) {
  testing::EmulatedMemory& memory = device_.memory;
  Tensor t = Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}).to(kEmulated);
  ASSERT_EQ(memory.from_host_calls, 1);
  Tensor z = Tensor::zeros({2, 3}, DType::Float32, kEmulated), ints = Tensor::zeros({3}, DType::Int32, kEmulated);
  Tensor f = Tensor::full({4}, 2.5f, kEmulated), c = t.clone();
  Tensor row = Tensor::empty({3}, DType::Float32, kEmulated);
  row.copy_from(t.row(1));
  f.fill(-1.0f);
  Tensor other = t.to(Device{Device::Kind::Emulated, 1});
  EXPECT_EQ(memory.from_host_calls, 1) << "a memory operation went through the host";
  EXPECT_EQ(memory.to_host_calls, 0);
  EXPECT_EQ(z.to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ints.to(Device::cpu()).to_vector(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(f.to_vector(), std::vector<float>(4, -1.0f));
  EXPECT_EQ(c.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(row.to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(other.device(), (Device{Device::Kind::Emulated, 1}));
  EXPECT_EQ(other.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(memory.to_host_calls, 6) << "each read back is one transfer";
  // A strided view still goes through the host (a device's strided copy is not in the seam).
  Tensor column = Tensor::empty({2, 1}, DType::Float32, kEmulated);
  column.copy_from(t.columns(0, 1));
  EXPECT_EQ(column.to_vector(), (std::vector<float>{1, 4}));
}

TEST_F(DeviceSeam, AnOpOnTensorsOfTwoDevicesIsNamed) {
  Tensor a = testing::random_tensor({2, 3}, 1).to(kEmulated), b = testing::random_tensor({3, 4}, 2);
  EXPECT_TRUE(
      testing::throws_error([&] { ops::matmul(a, b); }, {"matmul: argument 'b' is on cpu, the op runs on emulated:0"}));
}

// A few training steps (Adam, sparse cross-entropy) on each device from the same weights and
// batches: the same losses and weights, bit for bit, and the device's backend ran them.
void expect_cpu_bits(const std::function<std::unique_ptr<Model>()>& make, const Shape& sample,
                     testing::CountingBackend& backend) {
  Shape shape{10};
  for (int64_t d : sample) shape.push_back(d);
  Tensor x = testing::random_tensor(shape, 3);
  std::vector<int32_t> l{0, 1, 2, 3, 0, 1, 2, 3, 1, 2};
  Tensor y = Tensor::from_vector({10}, std::span<const int32_t>(l));
  auto train = [&](Model& model, Device device) {
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
  int before = backend.calls;
  std::vector<float> device_losses = train(*on_device, kEmulated);
  EXPECT_GT(backend.calls, before + 20) << "the step ran its kernels through the emulated device's backend";
  EXPECT_EQ(device_losses, cpu_losses);
  auto a = on_cpu->variables(), b = on_device->variables();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]->value.device(), kEmulated) << b[i]->name;
    EXPECT_EQ(b[i]->value.to_vector(), a[i]->value.to_vector()) << b[i]->name;
  }
  // What reads values on the host takes the copy path: metrics, weight files.
  Metric cpu_accuracy(Metric::Kind::SparseCategoricalAccuracy, "accuracy"), device_accuracy = cpu_accuracy;
  cpu_accuracy.update(y, on_cpu->call(x, CallContext{false, {}}));
  device_accuracy.update(y.to(kEmulated), on_device->call(x.to(kEmulated), CallContext{false, {}}));
  EXPECT_EQ(device_accuracy.result(), cpu_accuracy.result());
  testing::TempDir dir;
  on_device->save_weights(dir.file("w.safetensors"));
  auto reloaded = make();
  reloaded->load_weights(dir.file("w.safetensors"));
  auto c = reloaded->variables();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(c[i]->value.to_vector(), a[i]->value.to_vector()) << c[i]->name;
}

// The tutorial's mlp: Dense relu, Dropout, Dense softmax.
TEST_F(DeviceSeam, AnMlpTrainingStepGivesTheCpuBits) {
  using namespace layers;
  expect_cpu_bits(
      [] {
        auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
        m->add(Dense(16, "relu", {.input_shape = Shape{12}}));
        m->add(Dropout(0.25f));
        m->add(Dense(4, "softmax"));
        return m;
      },
      Shape{12}, backend_);
}

// A small cnn: Conv2D relu, max pooling, Flatten, Dense softmax.
TEST_F(DeviceSeam, ACnnTrainingStepGivesTheCpuBits) {
  using namespace layers;
  expect_cpu_bits(
      [] {
        auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
        m->add(Conv2D(4, 3, {.padding = "same", .activation = "relu", .input_shape = Shape{6, 6, 1}}));
        m->add(MaxPooling2D());
        m->add(Flatten());
        m->add(Dense(4, "softmax"));
        return m;
      },
      Shape{6, 6, 1}, backend_);
}

// Dense, BatchNormalization (its moving statistics on the device too), relu, Dense softmax.
TEST_F(DeviceSeam, ABatchNormalizationTrainingStepGivesTheCpuBits) {
  using namespace layers;
  expect_cpu_bits(
      [] {
        auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
        m->add(Dense(8, "", {.input_shape = Shape{12}}));
        m->add(BatchNormalization({.momentum = 0.9f}));
        m->add(layers::Activation("relu"));
        m->add(Dense(4, "softmax"));
        return m;
      },
      Shape{12}, backend_);
}

}  // namespace
}  // namespace tandem
