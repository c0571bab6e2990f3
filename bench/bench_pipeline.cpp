// Does the input pipeline starve training? Time per step of fit on tensors already in memory
// against fit on Dataset.from_tensor_slices().shuffle().batch().prefetch() (pipeline on its own
// thread), same model and batch, best of several passes each, interleaved.
// Usage: bench_pipeline [batch] [passes]. Data: MNIST-shaped (60,000 x 784), random values.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) try {
  int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  int passes = argc > 2 ? std::atoi(argv[2]) : 5;
  set_num_threads(1);
  const int64_t n = 60000;  // MNIST's size: the shuffle buffer fills once per epoch
  Tensor x = Tensor::empty({n, 784});
  Philox(1).uniforms(0, x.numel(), x.data<float>());
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));

  Sequential model;
  model.add(Dense(160, "elu", {.input_shape = Shape{784}}));
  for (int i = 0; i < 4; ++i) model.add(Dense(160, "elu"));
  model.add(Dense(10));
  model.compile(optimizers::SGD(0.01f, {.momentum = 0.95f}), Loss::sparse_categorical_crossentropy(true));
  data::Dataset pipeline =
      data::Dataset::from_tensor_slices({x, y}).shuffle(4096, 3).batch(batch).prefetch(data::Dataset::kAutotune);

  double best_memory = 1e9, best_pipeline = 1e9;
  int64_t steps = (n + batch - 1) / batch;
  for (int p = 0; p < passes; ++p) {
    auto t0 = Clock::now();
    model.fit(x, y, {.epochs = 1, .batch_size = batch, .verbose = 0});
    best_memory =
        std::min(best_memory, std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(steps));
    t0 = Clock::now();
    model.fit(pipeline, {.epochs = 1, .verbose = 0});
    best_pipeline =
        std::min(best_pipeline, std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(steps));
  }
  std::printf("{\"batch\": %lld, \"step_us_in_memory\": %.1f, \"step_us_pipeline\": %.1f, \"difference\": %.3f}\n",
              static_cast<long long>(batch), best_memory * 1e6, best_pipeline * 1e6, best_pipeline / best_memory - 1.0);
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
