// The CUDA device on a GPU (ctest label `gpu`; skipped with the reason where there is none):
// tensors' moves and memory operations, training steps against the CPU, the allocator's steady
// state, checkpoints across devices, MNIST on cuda:0, logical GPUs and MirroredStrategy over
// them, and the errors a user meets.
#include <cstdio>
#include <cstdlib>
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

using MakeModel = std::function<std::unique_ptr<Model>()>;

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

std::unique_ptr<Model> mlp() {
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

// Runs `checks` in a process of its own (a death test's child, started afresh), where no GPU has
// been used yet, so that it may split the card into logical GPUs first. It returns what failed
// ("" when nothing did), which the child prints and exits with.
void in_fresh_process(const std::function<std::string()>& checks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::string failed;
        try {
          failed = checks();
        } catch (const std::exception& e) {
          failed = e.what();
        }
        std::fprintf(stderr, "%s\n", failed.empty() ? "all held" : failed.c_str());
        std::_Exit(failed.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "all held");
}

// Card 0 split in two (set_logical_devices): two devices on one card, each its own stream and
// allocator, copies between them, a share past which memory is refused, and no split once in use.
TEST_F(Gpu, LogicalGpusSplitOneCardEachWithItsOwnShare) {
  in_fresh_process([] {
    std::string failed;
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) failed += what + "; ";
    };
    constexpr int64_t kGiB = int64_t{1} << 30;
    int cards = cuda::physical_device_count();
    cuda::set_logical_devices(0, {{.memory_limit_bytes = kGiB}, {.memory_limit_bytes = kGiB}});
    expect(cuda::device_count() == cards + 1,
           fmt::format("{} devices for {} cards, card 0 split in 2", cuda::device_count(), cards));
    std::vector<cuda::GpuInfo> gpus = cuda::devices();
    expect(gpus.size() >= 2 && gpus[0].physical == 0 && gpus[1].physical == 0 && gpus[1].memory == kGiB,
           "cuda:0 and cuda:1 on card 0, 1 GiB each");
    Tensor a = testing::random_tensor({4096}, 3).to(Device::cuda(0));
    Tensor b = a.to(Device::cuda(1));
    expect(b.device() == Device::cuda(1) && b.to_vector() == a.to_vector(), "a copy between two logical GPUs");
    std::string refused =
        testing::error_of([] { (void)Tensor::empty({kGiB / 2}, DType::Float32, Device::cuda(1)); });  // 2 GiB
    expect(refused.find("memory limit of 1073741824 bytes") != std::string::npos,
           "2 GiB on a logical GPU of 1 GiB: " + refused);
    expect(Tensor::zeros({16}, DType::Float32, Device::cuda(0)).to_vector().size() == 16, "cuda:0 after the refusal");
    std::string late = testing::error_of([] { cuda::set_logical_devices(0, {}); });
    expect(late.find("already in use") != std::string::npos, "a split once a GPU is in use: " + late);
    return failed;
  });
}

// MirroredStrategy over 2 and 4 logical GPUs of card 0 trains as over one, within 1e-5; in
// deterministic mode, to the same bits on 1, 2 and 4.
TEST_F(Gpu, MirroredOverLogicalGpusTrainsAsOneGpu) {
  in_fresh_process([] {
    cuda::set_logical_devices(0, std::vector<cuda::LogicalGpuOptions>(4));
    Tensor x = testing::random_tensor({96, 12}, 3);
    std::vector<int32_t> l(96);
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int32_t>(i % 4);
    Tensor y = Tensor::from_vector({96}, std::span<const int32_t>(l));
    auto weights = [&](int gpus, bool deterministic) {
      std::vector<Device> devices;
      for (int i = 0; i < gpus; ++i) devices.push_back(Device::cuda(i));
      distribute::MirroredStrategy mirrored({.deterministic = deterministic, .devices = devices});
      std::unique_ptr<Model> model;
      {
        auto scope = mirrored.scope();
        model = mlp();
      }
      model->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
      model->fit(x, y, {.epochs = 2, .batch_size = 32, .verbose = 0});
      std::vector<std::vector<float>> out;
      for (Variable* v : model->variables()) out.push_back(v->value.to_vector());
      return out;
    };
    std::string failed;
    auto one = weights(1, false);
    for (int gpus : {2, 4}) {
      auto many = weights(gpus, false);
      for (size_t i = 0; i < one.size(); ++i)
        if (!testing::all_close(std::vector<double>(many[i].begin(), many[i].end()),
                                std::vector<double>(one[i].begin(), one[i].end()), 1e-5, 1e-5))
          failed += fmt::format("weight {} over {} logical GPUs is not one GPU's within 1e-5; ", i, gpus);
    }
    auto exact = weights(1, true);
    for (int gpus : {2, 4})
      if (weights(gpus, true) != exact) failed += fmt::format("deterministic: {} logical GPUs' bits differ; ", gpus);
    return failed;
  });
}

}  // namespace
}  // namespace tandem
