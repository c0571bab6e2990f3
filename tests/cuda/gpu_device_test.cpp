// The CUDA device on a GPU (ctest label `gpu`; skipped with the reason where there is none):
// tensors' moves and memory operations, training steps against the CPU, the allocator's steady
// state, checkpoints across devices, MNIST on cuda:0, and the errors a user meets.
#include <functional>

#include "cuda/gpu_test.h"
#include "tandem/tandem.h"
#include "test_util.h"

namespace tandem {
namespace {

const Device kGpu = Device::cuda(0);

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override { TANDEM_SKIP_WITHOUT_GPU(); }
};

TEST_F(Gpu, TensorsMoveThereAndBackAndItsMemoryOperationsRunThere) {
  Tensor host = testing::random_tensor({3, 5}, 1);
  Tensor t = host.to(kGpu);
  EXPECT_EQ(t.device(), kGpu);
  EXPECT_EQ(t.to(Device::cpu()).to_vector(), host.to_vector());
  EXPECT_EQ(t.clone().to_vector(), host.to_vector());
  EXPECT_EQ(Tensor::zeros({4}, DType::Float32, kGpu).to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(Tensor::full({5}, 2.5f, kGpu).to_vector(), std::vector<float>(5, 2.5f));
  Tensor f = Tensor::empty({6}, DType::Float32, kGpu);
  f.fill(-1.25f);
  EXPECT_EQ(f.to_vector(), std::vector<float>(6, -1.25f));
  std::vector<int32_t> labels{3, 1, 4, 1, 5};
  Tensor ints = Tensor::from_vector({5}, std::span<const int32_t>(labels)).to(kGpu);
  Tensor back = ints.to(Device::cpu());
  EXPECT_EQ(std::vector<int32_t>(back.data<int32_t>(), back.data<int32_t>() + 5), labels);
  EXPECT_NE(testing::error_of([&] { (void)t.data<float>(); }), "") << "the host may not read a GPU's memory directly";
}

TEST_F(Gpu, ARequestLargerThanTheGpuIsRefusedByName) {
  std::string error = testing::error_of([] { (void)Tensor::empty({int64_t{1} << 48}, DType::Float32, kGpu); });
  EXPECT_NE(error.find("bytes"), std::string::npos) << error;
  EXPECT_NE(Tensor::zeros({4}, DType::Float32, kGpu).to_vector().size(), 0u) << "the GPU works after the refusal";
}

TEST_F(Gpu, AnAbsentGpuIsNamed) {
  std::string error =
      testing::error_of([] { (void)Tensor::empty({4}, DType::Float32, Device::cuda(cuda::device_count())); });
  EXPECT_NE(error.find("no device cuda:"), std::string::npos) << error;
}

using MakeModel = std::function<std::unique_ptr<Sequential>()>;

// Steps (Adam, sparse cross-entropy) from the same weights and batches on `device`: each step's
// loss, then the weights.
struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
};
Trained train(const MakeModel& make, const Shape& sample, Device device, int steps,
              const std::function<void(int step)>& after_step = {}) {
  Shape shape{16};
  for (int64_t d : sample) shape.push_back(d);
  Tensor x = testing::random_tensor(shape, 3);
  std::vector<int32_t> l{0, 1, 2, 3, 0, 1, 2, 3, 1, 2, 3, 0, 2, 1, 0, 3};
  Tensor y = Tensor::from_vector({16}, std::span<const int32_t>(l));
  auto model = make();
  for (Variable* v : model->variables()) {
    v->value = v->value.to(device);
    mark_trainable(v->value, v->trainable);
  }
  optimizers::Adam adam(0.01f);
  Loss loss_fn = Loss::sparse_categorical_crossentropy();
  Trained out;
  for (int step = 0; step < steps; ++step) {
    GradientTape tape;
    Tensor pred = model->call(x.to(device), CallContext{true, RandomKey{9, static_cast<uint64_t>(step), 0}});
    Tensor loss = ops::mean(loss_fn.per_sample(y.to(device), pred));
    std::vector<Variable*> vars = model->trainable_variables();
    adam.apply(vars, tape.gradient(loss, vars));
    out.losses.push_back(loss.item());
    if (after_step) after_step(step);
  }
  for (Variable* v : model->variables()) {
    EXPECT_EQ(v->value.device(), device) << v->name;
    out.weights.push_back(v->value.to_vector());
  }
  return out;
}

void expect_the_cpus_results(const MakeModel& make, const Shape& sample) {
  Trained cpu = train(make, sample, Device::cpu(), 3), gpu = train(make, sample, kGpu, 3);
  auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<double> expected(b.begin(), b.end());
    return testing::all_close(std::vector<double>(a.begin(), a.end()), expected, 1e-5, 1e-4);
  };
  EXPECT_TRUE(close(gpu.losses, cpu.losses));
  for (size_t i = 0; i < cpu.weights.size(); ++i) EXPECT_TRUE(close(gpu.weights[i], cpu.weights[i])) << "weight " << i;
}

std::unique_ptr<Sequential> mlp() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
  m->add(layers::Dense(32, "relu", {.input_shape = Shape{12}}));
  m->add(layers::Dropout(0.25f));
  m->add(layers::Dense(4, "softmax"));
  return m;
}

TEST_F(Gpu, AnMlpTrainsAsOnTheCpu) { expect_the_cpus_results(mlp, Shape{12}); }

TEST_F(Gpu, ACnnTrainsAsOnTheCpu) {
  expect_the_cpus_results(
      [] {
        auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
        m->add(layers::Conv2D(4, 3, {.padding = "same", .activation = "relu", .input_shape = Shape{8, 8, 1}}));
        m->add(layers::MaxPooling2D());
        m->add(layers::Conv2D(6, 3, {.activation = "relu"}));
        m->add(layers::Flatten());
        m->add(layers::Dense(4, "softmax"));
        return m;
      },
      Shape{8, 8, 1});
}

// The Dense layer before batch normalization has no bias, as Keras users write it: a bias there has
// no true gradient (normalization takes the mean out), so Adam turns its rounding noise into steps
// of about lr × noise / epsilon, and two summation orders part by 1e-4 on that bias (and 1e-5 on the
// moving mean it feeds). Measured on the CPU alone: inputs perturbed by one part in 1e7 move that
// bias by 1.3e-4 and the moving mean by 1.5e-5 after 3 steps, every other weight by under 1e-7;
// without the bias, every weight by under 1e-7.
TEST_F(Gpu, BatchNormalizationTrainsAsOnTheCpu) {
  expect_the_cpus_results(
      [] {
        auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 9});
        m->add(layers::Dense(8, "", {.use_bias = false, .input_shape = Shape{12}}));
        m->add(layers::BatchNormalization({.momentum = 0.9f}));
        m->add(layers::Activation("relu"));
        m->add(layers::Dense(4, "softmax"));
        return m;
      },
      Shape{12});
}

// Once a step has run, a step asks the driver for no memory: what it frees is handed out again.
TEST_F(Gpu, ASteadyStateStepCallsCudaMallocNever) {
  int64_t after_warm_up = 0;
  train(mlp, Shape{12}, kGpu, 8, [&](int step) {
    if (step == 2) after_warm_up = cuda::memory_stats(0).device_allocations;
  });
  cuda::MemoryStats stats = cuda::memory_stats(0);
  EXPECT_GT(stats.reused, 0);
  EXPECT_EQ(stats.device_allocations, after_warm_up) << "cudaMalloc calls in steps 4 to 8";
}

TEST_F(Gpu, CheckpointsWrittenOnTheGpuAreReadOnTheCpuAndBack) {
  testing::TempDir dir;
  auto on_gpu = mlp();
  for (Variable* v : on_gpu->variables()) v->value = v->value.to(kGpu);
  on_gpu->save_weights(dir.file("w.safetensors"));
  auto on_cpu = mlp();
  for (Variable* v : on_cpu->variables()) v->value = Tensor::zeros(v->value.shape());
  on_cpu->load_weights(dir.file("w.safetensors"));
  auto again = mlp();
  for (Variable* v : again->variables()) v->value = Tensor::zeros(v->value.shape(), DType::Float32, kGpu);
  on_cpu->save_weights(dir.file("w2.safetensors"));
  again->load_weights(dir.file("w2.safetensors"));
  auto a = on_gpu->variables(), b = on_cpu->variables(), c = again->variables();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]->value.to_vector(), a[i]->value.to_vector()) << a[i]->name;
    EXPECT_EQ(c[i]->value.to_vector(), a[i]->value.to_vector()) << a[i]->name;
  }
}

// The tutorial's MNIST model, placed on cuda:0, to the CPU's accuracy (one epoch each).
TEST_F(Gpu, MnistTrainsToTheCpusAccuracy) {
  std::optional<data::ImageDataset> found;
  try {
    found = data::load_dataset("mnist", {.data_dir = std::string(TANDEM_SOURCE_DIR) + "/data", .flatten = true});
  } catch (const Error& e) {
    GTEST_SKIP() << "MNIST is not here (bash scripts/setup fetches it): " << e.what();
  }
  const data::ImageDataset& mnist = *found;
  auto accuracy = [&](std::optional<Device> device) {
    Sequential model(SequentialOptions{.seed = 1});
    {
      std::optional<DeviceScope> on;
      if (device) on.emplace(*device);
      model.add(layers::Dense(128, "relu", {.input_shape = Shape{784}}));
      model.add(layers::Dropout(0.2f));
      model.add(layers::Dense(10, "softmax"));
    }
    model.compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
    model.fit(mnist.train.x, mnist.train.y, {.epochs = 1, .batch_size = 128, .verbose = 0});
    return log_value(model.evaluate(mnist.test.x, mnist.test.y, {.verbose = 0}), "accuracy");
  };
  double cpu = accuracy(std::nullopt), gpu = accuracy(kGpu);
  std::printf("MNIST, one epoch: test accuracy %.4f on the CPU, %.4f on cuda:0\n", cpu, gpu);
  EXPECT_NEAR(gpu, cpu, 0.005);
}

}  // namespace
}  // namespace tandem
