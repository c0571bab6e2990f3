// Trains a reference model for a fixed number of steps on one thread, for instruction counts:
// run under `valgrind --tool=callgrind` at two step counts, the difference divided by the
// difference in steps is the cost of one training step (setup and data cancel out).
// mlp5_256_mirrored2: the 5-layer MLP at global batch 256 under MirroredStrategy, 2 replicas × 1
// thread (every thread's instructions; waits sleep at once, see below).
// Usage: step_instructions mlp25|cnn64|mlp5_256_mirrored2 STEPS
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "tandem/distribute/strategy.h"
#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

int main(int argc, char** argv) try {
  if (argc != 3) fail("usage: step_instructions mlp25|cnn64|mlp5_256_mirrored2 STEPS");
  std::string workload = argv[1];
  int64_t steps = std::atoll(argv[2]);
  bool cnn = workload == "cnn64", mirrored = workload == "mlp5_256_mirrored2";
  if (!cnn && !mirrored && workload != "mlp25")
    fail("step_instructions: unknown workload \"{}\" (expected mlp25, cnn64 or mlp5_256_mirrored2)", workload);
  if (steps < 1 || steps > 64) fail("step_instructions: STEPS must be 1..64, got {}", argv[2]);
  set_num_threads(1);
  const int64_t batch = cnn ? 64 : mirrored ? 256 : 25, n = 64 * batch;
  Tensor x = Tensor::empty(cnn ? Shape{n, 28, 28, 1} : Shape{n, 784});
  Philox rng(1);
  rng.uniforms(0, x.numel(), x.data<float>());
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(rng.bits(static_cast<uint64_t>(i)) % 10);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));
  std::unique_ptr<distribute::Strategy> strategy;
  if (mirrored) strategy = std::make_unique<distribute::MirroredStrategy>(2, 1);
  std::optional<distribute::Strategy::Scope> scope;
  if (strategy) scope.emplace(strategy.get());
  Sequential model;
  if (cnn) {
    model.add(Conv2D(32, 3, {.activation = "relu", .input_shape = Shape{28, 28, 1}}));
    model.add(MaxPooling2D());
    model.add(Flatten());
    model.add(Dense(64, "relu"));
    model.add(Dense(10));
    model.compile(optimizers::Adam(), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  } else if (mirrored) {
    model.add(Dense(160, "elu", {.input_shape = Shape{784}}));
    for (int i = 0; i < 4; ++i) model.add(Dense(160, "elu"));
    model.add(Dense(10));
    model.compile(optimizers::SGD(0.01f, {.momentum = 0.95f}), Loss::sparse_categorical_crossentropy(true),
                  {"accuracy"});
  } else {
    model.add(Dense(128, "relu", {.input_shape = Shape{784}}));
    model.add(Dropout(0.2f));
    model.add(Dense(10, "softmax"));
    model.compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  }
  model.fit(x.slice(0, batch), y.slice(0, batch),
            {.epochs = 1, .batch_size = batch, .verbose = 0});  // warm-up: primitives made
  model.fit(x.slice(0, steps * batch), y.slice(0, steps * batch), {.epochs = 1, .batch_size = batch, .verbose = 0});
  std::printf("%s: %lld steps done\n", workload.c_str(), static_cast<long long>(steps));
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
