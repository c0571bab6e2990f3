// Tandem on cuda:0 for the GPU bench (bench/gpu/run.sh runs it beside bench/gpu/torch_peer.py on
// the same card). One line of JSON per figure:
//   bench_gpu mlp003 float32|mixed_bfloat16  the third tutorial's CIFAR-10 MLP (Flatten → 3000 relu
//                                             → 1000 relu → 10) at a batch of 1000, samples/s of
//                                             fit's steps, and cudaMalloc calls per steady step
//   bench_gpu floor                          the same step's matrix products alone through cuBLAS
//   bench_gpu cnn-mnist DATA_DIR             the tutorial's CNN on MNIST to 98.5% test accuracy:
//                                             wall seconds from the process's start
#include <chrono>
#include <cstdio>
#include <cstring>

#include "cuda/device_api.h"
#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;
using Clock = std::chrono::steady_clock;

namespace {

const auto kStart = Clock::now();
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Tensor random_images(int64_t rows, uint64_t seed) {
  Tensor x = Tensor::empty({rows, 32, 32, 3});
  Philox rng(seed);
  rng.uniforms(0, x.numel(), x.data<float>());
  return x;
}

int mlp003(const std::string& policy) {
  mixed_precision::set_global_policy(policy);
  const int64_t batch = 1000, batches = 20;
  Tensor x = random_images(batch * batches, 1);
  std::vector<int32_t> labels(static_cast<size_t>(batch * batches));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  Tensor y = Tensor::from_vector({batch * batches}, std::span<const int32_t>(labels));
  Sequential model;
  {
    auto on = with_device(Device::cuda(0));
    model.add(Flatten({.input_shape = Shape{32, 32, 3}}));
    model.add(Dense(3000, "relu"));
    model.add(Dense(1000, "relu"));
    model.add(Dense(10, "sigmoid"));
  }
  model.compile(optimizers::SGD(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  model.fit(x, y, {.epochs = 1, .batch_size = batch, .verbose = 0});  // warm: the allocator's cache fills
  cuda::synchronize(0);
  int64_t before = cuda::memory_stats(0).device_allocations;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    model.fit(x, y, {.epochs = 1, .batch_size = batch, .verbose = 0});
    cuda::synchronize(0);
    best = std::max(best, static_cast<double>(batch * batches) / seconds_since(t0));
  }
  double mallocs = static_cast<double>(cuda::memory_stats(0).device_allocations - before) / (3.0 * batches);
  std::printf(
      "{\"who\": \"tandem\", \"what\": \"mlp003\", \"precision\": \"%s\", \"samples_per_s\": %.1f, "
      "\"cuda_malloc_per_step\": %.3f}\n",
      policy.c_str(), best, mallocs);
  return 0;
}

// The step's products alone (forward, dW of each layer, dX of the two upper ones) through cuBLAS
// in float32, TF32 off, on operands already on the GPU.
int floor() {
  const int64_t b = 1000;
  const int64_t dims[4] = {3072, 3000, 1000, 10};
  std::vector<Tensor> acts, weights, grads;
  for (int i = 0; i < 4; ++i) acts.push_back(Tensor::full({b, dims[i]}, 0.5f, Device::cuda(0)));
  for (int i = 0; i < 3; ++i) {
    weights.push_back(Tensor::full({dims[i], dims[i + 1]}, 0.01f, Device::cuda(0)));
    grads.push_back(Tensor::full({dims[i], dims[i + 1]}, 0.0f, Device::cuda(0)));
  }
  void *stream = nullptr, *blas = nullptr;
  auto check = [](int code, const char* what) {
    if (code != 0) throw Error(std::string(what) + ": " + cuda::api::error_text(code));
  };
  check(cuda::api::set_device(0), "cudaSetDevice");
  check(cuda::api::create_stream(&stream), "cudaStreamCreate");
  check(cuda::api::blas_create(&blas, stream), "cublasCreate");
  auto f = [](const Tensor& t) { return t.buffer<float>(); };
  auto step = [&] {
    for (int i = 0; i < 3; ++i) {
      int64_t in = dims[i], out = dims[i + 1];
      cuda::api::blas_sgemm(blas, false, false, b, out, in, 1, f(acts[i]), in, f(weights[i]), out, 0, f(acts[i + 1]),
                            out);
      cuda::api::blas_sgemm(blas, true, false, in, out, b, 1, f(acts[i]), in, f(acts[i + 1]), out, 0, f(grads[i]), out);
      if (i > 0)
        cuda::api::blas_sgemm(blas, false, true, b, in, out, 1, f(acts[i + 1]), out, f(weights[i]), out, 0, f(acts[i]),
                              in);
    }
  };
  for (int i = 0; i < 5; ++i) step();
  cuda::api::synchronize_stream(stream);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    for (int i = 0; i < 50; ++i) step();
    cuda::api::synchronize_stream(stream);
    best = std::max(best, 50.0 * b / seconds_since(t0));
  }
  std::printf(
      "{\"who\": \"cublas-floor\", \"what\": \"mlp003\", \"precision\": \"float32\", \"samples_per_s\": %.1f}\n", best);
  return 0;
}

int cnn_mnist(const std::string& data_dir) {
  auto mnist = data::load_dataset("mnist", {.data_dir = data_dir, .channels = true});
  Sequential model;
  {
    auto on = with_device(Device::cuda(0));
    model.add(Conv2D(32, 3, {.activation = "relu", .input_shape = Shape{28, 28, 1}}));
    model.add(MaxPooling2D());
    model.add(Flatten());
    model.add(Dense(64, "relu"));
    model.add(Dense(10));
  }
  model.compile(optimizers::Adam(), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  double accuracy = 0;
  int epoch = 0;
  for (; epoch < 10 && accuracy < 0.985; ++epoch) {
    model.fit(mnist.train.x, mnist.train.y, {.epochs = 1, .batch_size = 64, .verbose = 0});
    accuracy = log_value(model.evaluate(mnist.test.x, mnist.test.y, {.batch_size = 1000}), "accuracy");
  }
  std::printf(
      "{\"who\": \"tandem\", \"what\": \"cnn-mnist\", \"epochs\": %d, \"test_accuracy\": %.4f, "
      "\"wall_s\": %.2f}\n",
      epoch, accuracy, seconds_since(kStart));
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string what = argc > 1 ? argv[1] : "";
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_gpu: no GPU here: %s\n", cuda::why_none().c_str());
    return 2;
  }
  if (what == "mlp003") return mlp003(argc > 2 ? argv[2] : "float32");
  if (what == "floor") return floor();
  if (what == "cnn-mnist") return cnn_mnist(argc > 2 ? argv[2] : "data");
  std::fprintf(stderr, "usage: bench_gpu mlp003 [float32|mixed_bfloat16] | floor | cnn-mnist DATA_DIR\n");
  return 2;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
