// Logical CPU devices and placement (devices.h): tensors counted on their device and refused past
// its limit or on a device not made; to_device's gradient between two CPU devices; a model whose
// layers sit on three devices trains to the bits of the same model on one, in fit and in a custom
// loop, and its checkpoints read either way; the over-budget placement refused before training;
// placement under a replicated strategy refused.
#include <gtest/gtest.h>

#include <optional>

#include "tandem/devices.h"
#include "tandem/model.h"
#include "tandem/runtime.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;
using testing::error_of;

// The process's logical devices for one test, back to the one default device after it.
struct Devices {
  explicit Devices(const std::vector<CpuDeviceOptions>& devices) { set_cpu_devices(devices); }
  ~Devices() { set_cpu_devices({{}}); }
};

TEST(Placement, DevicesCountTheirTensorsAndRefuseWhatDoesNotFit) {
  Devices devices({{}, {.threads = 1}, {.memory_limit_bytes = 4000}});
  EXPECT_EQ(num_cpu_devices(), 3);
  EXPECT_EQ(Device::cpu(1).name(), "cpu:1");
  EXPECT_EQ(Device::cpu().name(), "cpu");
  {
    Tensor t = Tensor::full({10}, 1.5f, Device::cpu(1));
    EXPECT_EQ(t.device(), Device::cpu(1));
    EXPECT_EQ(device_bytes_in_use(Device::cpu(1)), 40);
    Tensor u = t.to(Device::cpu(2)), back = u.to(Device::cpu());
    EXPECT_EQ(u.device(), Device::cpu(2));
    EXPECT_EQ(back.device(), Device::cpu());
    EXPECT_EQ(back.to_vector(), t.to_vector());
    EXPECT_EQ(device_bytes_in_use(Device::cpu(2)), 40);
  }
  EXPECT_EQ(device_bytes_in_use(Device::cpu(1)), 0);  // freed, refunded
  EXPECT_EQ(device_bytes_in_use(Device::cpu(2)), 0);

  Tensor held = Tensor::empty({900}, DType::Float32, Device::cpu(2));  // 3600 of its 4000 bytes
  std::string said = error_of([] { Tensor::empty({200}, DType::Float32, Device::cpu(2)); });
  EXPECT_NE(said.find("cpu:2 is out of memory: a tensor of 800 bytes does not fit beside the 3.6 kB living there "
                      "(its limit is 4.0 kB)"),
            std::string::npos)
      << said;
  EXPECT_EQ(device_bytes_in_use(Device::cpu(2)), 3600);  // the refused tensor is not counted
  said = error_of([] { Tensor::empty({1}, DType::Float32, Device::cpu(3)); });
  EXPECT_NE(said.find("there is no device cpu:3; 3 logical CPU devices are made (cpu:0 to cpu:2"), std::string::npos)
      << said;
  said = error_of([] { auto scope = with_device(Device::cpu(7)); });
  EXPECT_NE(said.find("with_device: there is no device cpu:7"), std::string::npos) << said;
  said = error_of([] { set_cpu_devices({{}}); });
  EXPECT_NE(said.find("cpu:2 still holds 3.6 kB of tensors"), std::string::npos) << said;
  said = error_of([] { set_cpu_devices({{.threads = -1}}); });
  EXPECT_NE(said.find("cpu:0's threads must be from 1 to"), std::string::npos) << said;

  // A device's threads are its ops' while they run there.
  set_num_threads(2);
  {
    ComputeOn on(Device::cpu(1));
    EXPECT_EQ(num_threads(), 1);
  }
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(0);
}

// The gradient comes back to the input's device, with the values a move does not change.
TEST(Placement, ToDeviceMovesTheGradientBack) {
  Devices devices({{}, {}});
  Tensor x = testing::random_tensor({3, 4}, 5);
  mark_trainable(x);
  GradientTape tape;
  Tensor y = ops::square(ops::to_device(x, Device::cpu(1)));
  EXPECT_EQ(y.device(), Device::cpu(1));
  Tensor loss = ops::sum(ops::to_device(y, Device::cpu()));
  Tensor g = tape.gradient(loss, std::vector<Tensor>{x})[0];
  EXPECT_EQ(g.device(), Device::cpu());
  std::vector<float> xs = x.to_vector(), gs = g.to_vector();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(gs[i], 2.0f * xs[i]);
  EXPECT_EQ(compute_device(), Device::cpu());  // the backward pass ended on the input's device
}

// Dense → [cpu:1: Dense, Dropout] → [cpu:2: BatchNormalization, Dense], or all on the default
// device.
std::unique_ptr<Model> placed_model(bool placed) {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 7});
  m->add(Dense(48, "relu", {.input_shape = Shape{20}}));
  {
    std::optional<DeviceScope> on;
    if (placed) on.emplace(Device::cpu(1));
    m->add(Dense(32, "elu"));
    m->add(Dropout(0.25f));
  }
  {
    std::optional<DeviceScope> on;
    if (placed) on.emplace(Device::cpu(2));
    m->add(BatchNormalization());
    m->add(Dense(5));
  }
  m->compile(optimizers::Adam(0.01f), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  return m;
}

struct Data {
  Tensor x, y;
};
Data data(int64_t n) {
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 3) % 5);
  return {testing::random_tensor({n, 20}, 9), Tensor::from_vector({n}, std::span<const int32_t>(labels))};
}

void expect_same_bits(Model& a, Model& b, const char* what) {
  auto x = a.state(), y = b.state();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].first, y[i].first) << what;
    EXPECT_EQ(x[i].second.astype(DType::Float32).to_vector(), y[i].second.astype(DType::Float32).to_vector())
        << what << ": " << x[i].first;
  }
}

TEST(Placement, AModelOnThreeDevicesTrainsAsOnOne) {
  Devices devices({{}, {.threads = 1}, {.threads = 2}});
  Data d = data(320);
  auto one = placed_model(false), placed = placed_model(true);
  EXPECT_EQ(placed->layers()[1]->variables()[0].value.device(), Device::cpu(1));
  EXPECT_EQ(placed->layers()[4]->variables()[0].value.device(), Device::cpu(2));
  EXPECT_FALSE(placed->layers()[0]->device().has_value());
  History h1 = one->fit(d.x, d.y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  History h2 = placed->fit(d.x, d.y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  expect_same_bits(*one, *placed, "fit");
  EXPECT_EQ(h1.history["loss"], h2.history["loss"]);
  // The optimizer's slots live with their variables.
  for (auto& [name, t] : placed->optimizer().state())
    if (name.find("dense_2/") != std::string::npos) EXPECT_EQ(t.device(), Device::cpu(2)) << name;
  EXPECT_GT(device_bytes_in_use(Device::cpu(1)), 0);
  EXPECT_EQ(placed->predict(d.x).to_vector(), one->predict(d.x).to_vector());
  EXPECT_EQ(placed->predict(d.x).device(), Device::cpu());

  // A custom loop: the same steps on both.
  auto loop = [&](Model& model) {
    for (int64_t step = 0; step < 10; ++step) {
      Tensor x = d.x.slice(step * 32, step * 32 + 32), y = d.y.slice(step * 32, step * 32 + 32);
      GradientTape tape;
      Tensor loss = ops::mean(model.loss().per_sample(y, model(x, true)));
      std::vector<Variable*> variables = model.trainable_variables();
      model.optimizer().apply(variables, tape.gradient(loss, variables));
    }
  };
  loop(*one);
  loop(*placed);
  expect_same_bits(*one, *placed, "custom loop");

  // Checkpoints read either way: a placed model's file in an unplaced one and back.
  testing::TempDir dir;
  placed->save_weights(dir.file("placed.safetensors"));
  auto reader = placed_model(false);
  reader->build(Shape{20});
  reader->load_weights(dir.file("placed.safetensors"));
  EXPECT_EQ(reader->predict(d.x).to_vector(), placed->predict(d.x).to_vector());
  auto placed_reader = placed_model(true);
  placed_reader->build(Shape{20});
  placed_reader->load_weights(dir.file("placed.safetensors"));
  EXPECT_EQ(placed_reader->layers()[1]->variables()[0].value.device(), Device::cpu(1));
  EXPECT_EQ(placed_reader->predict(d.x).to_vector(), placed->predict(d.x).to_vector());
}

// Layers placed on a device whose memory their variables and Adam's two slots exceed are refused
// before the first step, naming the device, what they need and its limit; on a device with more
// memory they train. A batch whose activations do not fit fails naming the device.
// A softmax output layer on another device: the loss still scores its (moved) output through the
// logits, as on one device, so training gives the same bits.
TEST(Placement, APlacedSoftmaxLayerIsScoredThroughItsLogits) {
  Devices devices({{}, {}});
  Data d = data(96);
  auto make = [](bool placed) {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
    m->add(Dense(16, "relu", {.input_shape = Shape{20}}));
    std::optional<DeviceScope> on;
    if (placed) on.emplace(Device::cpu(1));
    m->add(Dense(5, "softmax"));
    m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy");
    return m;
  };
  auto one = make(false), placed = make(true);
  EXPECT_EQ(placed->layers()[1]->device(), Device::cpu(1));
  one->fit(d.x, d.y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  placed->fit(d.x, d.y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  expect_same_bits(*one, *placed, "fit");
}

TEST(Placement, APlacementThatDoesNotFitIsRefusedBeforeTraining) {
  Devices devices({{}, {.memory_limit_bytes = 260'000}, {.memory_limit_bytes = 2'000'000}});
  Data d = data(64);
  auto make = [](Device device) {
    auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
    m->add(Dense(100, "relu", {.input_shape = Shape{20}}));
    {
      auto on = with_device(device);
      m->add(Dense(256, "relu"));  // 103.4 kB of variables, 310.3 kB with Adam's slots
    }
    m->add(Dense(5));
    m->compile(optimizers::Adam(0.01f), Loss::sparse_categorical_crossentropy(true));
    return m;
  };
  auto small = make(Device::cpu(1));
  std::vector<float> before = small->layers()[1]->variables()[0].value.to_vector();
  std::string said = error_of([&] { small->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0}); });
  EXPECT_NE(said.find("the layers placed on cpu:1 need 310.3 kB there (their variables and 2 optimizer slots per "
                      "trainable one, Adam), more than its memory limit of 260.0 kB"),
            std::string::npos)
      << said;
  EXPECT_EQ(small->layers()[1]->variables()[0].value.to_vector(), before);  // untouched
  auto large = make(Device::cpu(2));
  History h = large->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0});
  EXPECT_EQ(h.history["loss"].size(), 1u);
  // Activations count too: 8000 rows of 100 features moved there do not fit beside the variables.
  Data big = data(8000);
  said = error_of([&] { large->predict(big.x, 8000); });
  EXPECT_NE(said.find("cpu:2 is out of memory: a tensor of 3.2 MB does not fit beside the 310.3 kB living there "
                      "(its limit is 2.0 MB)"),
            std::string::npos)
      << said;
}

TEST(Placement, PlacementUnderAReplicatedStrategyIsRefused) {
  Devices devices({{}, {}});
  distribute::MirroredStrategy mirrored(2);
  auto scope = mirrored.scope();
  Sequential m;
  m.add(Dense(8, "relu", {.input_shape = Shape{20}}));
  {
    auto on = with_device(Device::cpu(1));
    m.add(Dense(5));
  }
  m.compile("sgd", Loss::sparse_categorical_crossentropy(true));
  Data d = data(64);
  std::string said = error_of([&] { m.fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .verbose = 0}); });
  EXPECT_NE(said.find("Dense \"dense_1\" is placed on cpu:1 (with_device), but mirrored:2 runs 2 replicas"),
            std::string::npos)
      << said;
}

}  // namespace
}  // namespace tandem
