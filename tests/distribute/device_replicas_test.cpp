// Replicas and workers on devices, proved on emulated devices: memory the host may not read
// directly and the CPU's kernels behind a backend that counts its calls (emulated_device.h).
// MirroredStrategy with a replica per device (MirroredOptions::devices) and an in-process
// parameter-server cluster with a device per worker (worker_devices) against the same strategy on
// the host: the same kernels and the same reduction order give the same bits, while every
// replica's (worker's) variables live on its own device.
#include "emulated_device.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/strategy.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

Device emulated(int index) { return {Device::Kind::Emulated, index}; }

struct Data {
  Tensor x, y;
};
Data blobs(int64_t n, Shape per_sample) {
  Shape shape{n};
  for (int64_t d : per_sample) shape.push_back(d);
  std::vector<int32_t> l(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) l[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  return {testing::random_tensor(shape, 5), Tensor::from_vector({n}, std::span<const int32_t>(l))};
}

// The tutorial's mlp shape (Dense relu, Dropout, Dense softmax) with Adam, and a small cnn with
// momentum: slots on the devices, dropout masks keyed by the global row.
std::unique_ptr<Model> mlp() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(Dense(16, "relu", {.input_shape = Shape{6}}));
  m->add(Dropout(0.3f));
  m->add(Dense(4, "softmax"));
  m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}
std::unique_ptr<Model> cnn() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(Conv2D(4, 3, {.padding = "same", .activation = "relu", .input_shape = Shape{6, 6, 1}}));
  m->add(MaxPooling2D());
  m->add(Flatten());
  m->add(Dense(4));
  m->compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  return m;
}

// Dense → synchronized BatchNormalization (statistics over every device's rows) → relu → Dense.
std::unique_ptr<Model> batch_norm() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(Dense(8, "", {.input_shape = Shape{6}}));
  m->add(BatchNormalization({.momentum = 0.9f, .synchronized = true}));
  m->add(layers::Activation("relu"));
  m->add(Dense(4));
  m->compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  return m;
}

struct Trained {
  std::unique_ptr<distribute::Strategy> strategy;  // outlives the model
  std::unique_ptr<Model> model;
  History history;
};
Trained train(const std::function<std::unique_ptr<Model>()>& make, const Data& d, distribute::MirroredOptions options) {
  Trained t;
  options.threads_per_replica = 1;
  t.strategy = std::make_unique<distribute::MirroredStrategy>(options);
  {
    auto scope = t.strategy->scope();
    t.model = make();
  }
  // 98 rows at 24: the last batch has 2 rows, one per replica.
  t.history = t.model->fit(d.x, d.y, {.epochs = 2, .batch_size = 24, .verbose = 0});
  return t;
}

void expect_same_bits(const Trained& a, const Trained& b, const std::string& what) {
  auto va = a.model->variables(), vb = b.model->variables();
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i)
    EXPECT_EQ(vb[i]->value.to_vector(), va[i]->value.to_vector()) << what << ": " << va[i]->name;
  EXPECT_EQ(b.history["loss"], a.history["loss"]) << what;
}

class DeviceReplicas : public ::testing::Test {
 protected:
  testing::EmulatedDevice device_;
};

TEST_F(DeviceReplicas, ReplicasOnDevicesTrainAsReplicasOnCoresWithTheirVariablesOnTheirDevices) {
  for (std::string what : {"mlp", "cnn", "batch_norm"}) {
    bool conv = what == "cnn";
    auto make = conv ? std::function<std::unique_ptr<Model>()>(cnn) : what == "mlp" ? mlp : batch_norm;
    Data d = conv ? blobs(50, Shape{6, 6, 1}) : blobs(98, Shape{6});
    Trained cores = train(make, d, {.num_replicas = 2});
    int calls = device_.backend.calls;
    Trained devices = train(make, d, {.devices = {emulated(0), emulated(1)}});
    EXPECT_GT(device_.backend.calls, calls + 100) << what << ": the replicas' kernels ran on the emulated devices";
    EXPECT_GT(device_.memory.to_host_calls, 0) << what << ": the gradients were reduced through the host";
    expect_same_bits(cores, devices, what);
    EXPECT_EQ(devices.strategy->num_replicas_in_sync(), 2);
    for (int r = 0; r < 2; ++r)
      for (Variable* v : devices.model->replica_variables(r))
        EXPECT_EQ(v->value.device(), emulated(r)) << what << ": replica " << r << "'s " << v->name;
    // A second fit (the model's own layers already on the first device) and predict on host rows.
    devices.model->fit(d.x, d.y, {.epochs = 1, .batch_size = 24, .verbose = 0});
    cores.model->fit(d.x, d.y, {.epochs = 1, .batch_size = 24, .verbose = 0});
    EXPECT_EQ(devices.model->predict(d.x).to_vector(), cores.model->predict(d.x).to_vector()) << what;
  }
}

// Deterministic mode: the same bits on one device, two and four, and as on the host's cores.
TEST_F(DeviceReplicas, DeterministicModeGivesTheSameBitsForAnyNumberOfDevices) {
  Data d = blobs(98, Shape{6});
  Trained one = train(mlp, d, {.deterministic = true, .devices = {emulated(0)}});
  Trained two = train(mlp, d, {.deterministic = true, .devices = {emulated(0), emulated(1)}});
  Trained four =
      train(mlp, d, {.deterministic = true, .devices = {emulated(0), emulated(1), emulated(2), emulated(3)}});
  Trained cores = train(mlp, d, {.num_replicas = 2, .deterministic = true});
  expect_same_bits(one, two, "two devices against one");
  expect_same_bits(one, four, "four devices against one");
  expect_same_bits(cores, two, "two devices against two cores");
}

// A custom loop's Optimizer::apply reduces a device replica's gradients too.
TEST_F(DeviceReplicas, ACustomLoopStepsEveryDeviceReplicaAlike) {
  distribute::MirroredStrategy strategy({.threads_per_replica = 1, .devices = {emulated(0), emulated(1)}});
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = mlp();
  }
  Data d = blobs(24, Shape{6});
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 24, .verbose = 0});  // places the replicas
  optimizers::SGD sgd(0.1f);
  Loss loss_fn = Loss::sparse_categorical_crossentropy();
  auto ids = strategy.run([&] {
    GradientTape tape;
    Tensor loss = compute_average_loss(loss_fn.per_sample(d.y, (*model)(d.x, true)), 2 * d.x.dim(0));
    std::vector<Variable*> variables = model->trainable_variables();
    sgd.apply(variables, tape.gradient(loss, variables));
    return distribute::replica_context()->replica_id;
  });
  EXPECT_EQ(ids.values, (std::vector<int>{0, 1}));
  auto a = model->replica_variables(0), b = model->replica_variables(1);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]->value.to_vector(), b[i]->value.to_vector()) << a[i]->name;
}

// Synchronous parameter servers in process, each worker on its own device: the host's bits.
TEST_F(DeviceReplicas, ParameterServerWorkersOnDevicesTrainAsOnTheHost) {
  Data d = blobs(96, Shape{6});
  auto trained = [&](std::vector<Device> devices) {
    distribute::ParameterServerStrategy ps(
        distribute::ClusterSpec::local(1, 2),
        {.mode = distribute::PsMode::Synchronous, .threads_per_worker = 1, .worker_devices = devices});
    std::unique_ptr<Model> model;
    {
      auto scope = ps.scope();
      model = mlp();
    }
    History h = model->fit(d.x, d.y, {.epochs = 2, .batch_size = 16, .verbose = 0});
    std::vector<std::vector<float>> out;
    for (Variable* v : model->variables()) out.push_back(v->value.to_vector());
    out.push_back(std::vector<float>(h["loss"].begin(), h["loss"].end()));
    return out;
  };
  auto host = trained({});
  int calls = device_.backend.calls;
  auto devices = trained({emulated(0), emulated(1)});
  EXPECT_GT(device_.backend.calls, calls + 100) << "the workers' kernels ran on the emulated devices";
  EXPECT_EQ(devices, host);
  std::string error = testing::error_of([] {
    distribute::ParameterServerStrategy ps(distribute::ClusterSpec::local(1, 2), {.worker_devices = {emulated(0)}});
  });
  EXPECT_NE(error.find("1 worker_devices for 2 workers"), std::string::npos) << error;
}

TEST_F(DeviceReplicas, MistakesAreNamed) {
  auto expect_named = [](const std::function<void()>& make, const std::string& words) {
    std::string error = testing::error_of(make);
    EXPECT_NE(error.find(words), std::string::npos) << error;
  };
  expect_named(
      [] {
        distribute::MirroredStrategy s({.devices = {emulated(0), emulated(0)}});
      },
      "device emulated:0 is given twice");
  expect_named([] { distribute::MirroredStrategy s({.num_replicas = 3, .devices = {emulated(0)}}); },
               "num_replicas is 3 but 1 devices were given");
  expect_named([] { distribute::CentralStorageStrategy s({.devices = {emulated(0)}}); },
               "CentralStorageStrategy: devices (emulated:0...) are not taken");
}

}  // namespace
}  // namespace tandem
