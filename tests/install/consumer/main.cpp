// Trains a small model on generated data through the installed library; prints the final loss.
#include <cstdio>
#include <vector>

#include "tandem/tandem.h"

int main() {
  using namespace tandem;
  using namespace tandem::layers;
  const int64_t n = 256;
  Tensor x = Tensor::empty({n, 8});
  Philox rng(1);
  rng.uniforms(0, x.numel(), x.data<float>());
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = x.data<float>()[i * 8] > 0.5f ? 1 : 0;
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));
  Sequential model;
  model.add(Dense(16, "relu", {.input_shape = Shape{8}}));
  model.add(Dense(2, "softmax"));
  model.compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  History h = model.fit(x, y, {.epochs = 20, .batch_size = 32, .verbose = 0});
  std::printf("consumer: first loss %.4f, last loss %.4f\n", h["loss"].front(), h["loss"].back());
  return h["loss"].back() < h["loss"].front() ? 0 : 1;
}
