// Tandem on cuda:0 for the GPU bench (bench/gpu/run.sh runs it beside bench/gpu/torch_peer.py on
// the same card). One line of JSON per figure, each naming the card and its driver:
//   bench_gpu mlp003 float32|tf32|mixed_bfloat16  the third tutorial's CIFAR-10 MLP (Flatten → 3000
//                                    relu → 1000 relu → 10) at a batch of 1000: samples/s of fit's
//                                    steps, cudaMalloc calls per steady step (the allocator's), the
//                                    driver's free memory lost per steady step (anything that
//                                    allocated outside the allocator, cuBLAS included) and the
//                                    allocator's peak bytes in use
//   bench_gpu floor float32|tf32     the same step's nine matrix products alone through cuBLAS, on
//                                    random operands: samples/s and each product's time, called
//                                    straight and through Tandem's backend as Dense calls it
//   bench_gpu mlp25 DATA_DIR         the first tutorial's MLP on MNIST at a batch of 25: samples/s
//   bench_gpu cnn-mnist DATA_DIR     the tutorial's CNN on MNIST to 98.5% test accuracy: wall
//                                    seconds from the process's start
//   bench_gpu steps                  three steps of the mlp003 model and nothing printed (for a
//                                    cuBLAS call log: CUBLAS_LOGINFO_DBG=1, scripts/gpu-check run)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>

#include "cuda/device_api.h"
#include "kernels/backend.h"
#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;
using Clock = std::chrono::steady_clock;

namespace {

const auto kStart = Clock::now();
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void check(int code, const char* what) {
  if (code != 0) throw Error(std::string(what) + ": " + cuda::api::error_text(code));
}

// "\"gpu\": \"NVIDIA H200\", \"driver\": 13000": the card every figure was measured on.
std::string card() {
  int driver = 0;
  check(cuda::api::driver_version(&driver), "cudaDriverGetVersion");
  return "\"gpu\": \"" + cuda::devices().at(0).name + "\", \"driver\": " + std::to_string(driver);
}

size_t driver_free_bytes() {
  size_t free_bytes = 0, total = 0;
  check(cuda::api::set_device(0), "cudaSetDevice");
  check(cuda::api::memory_info(&free_bytes, &total), "cudaMemGetInfo");
  return free_bytes;
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float low = 0.0f, float high = 1.0f) {
  Tensor x = Tensor::empty(shape);
  Philox rng(seed);
  rng.uniforms(0, x.numel(), x.data<float>());
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = low + (high - low) * p[i];
  return x;
}

struct Mlp003 {
  static constexpr int64_t kBatch = 1000;
  Tensor x, y;
  Sequential model;
  explicit Mlp003(int64_t batches) : x(random_tensor({kBatch * batches, 32, 32, 3}, 1)) {
    std::vector<int32_t> labels(static_cast<size_t>(kBatch * batches));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
    y = Tensor::from_vector({kBatch * batches}, std::span<const int32_t>(labels));
    auto on = with_device(Device::cuda(0));
    model.add(Flatten({.input_shape = Shape{32, 32, 3}}));
    model.add(Dense(3000, "relu"));
    model.add(Dense(1000, "relu"));
    model.add(Dense(10, "sigmoid"));
    model.compile(optimizers::SGD(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  }
  void epoch() {
    model.fit(x, y, {.epochs = 1, .batch_size = kBatch, .verbose = 0});
    cuda::synchronize(0);
  }
};

int mlp003(const std::string& precision) {
  if (precision != "float32" && precision != "tf32" && precision != "mixed_bfloat16")
    throw Error("mlp003: the precision is float32, tf32 or mixed_bfloat16, not " + precision);
  mixed_precision::set_global_policy(precision == "mixed_bfloat16" ? "mixed_bfloat16" : "float32");
  cuda::enable_tensor_float_32(precision == "tf32");
  const int64_t batches = 20;
  Mlp003 job(batches);
  job.epoch();  // warm: the allocator's cache fills
  int64_t before = cuda::memory_stats(0).device_allocations;
  size_t free_before = driver_free_bytes();
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    job.epoch();
    best = std::max(best, static_cast<double>(Mlp003::kBatch * batches) / seconds_since(t0));
  }
  double steps = 3.0 * batches;
  double mallocs = static_cast<double>(cuda::memory_stats(0).device_allocations - before) / steps;
  double lost = (static_cast<double>(free_before) - static_cast<double>(driver_free_bytes())) / steps;
  std::printf(
      "{\"who\": \"tandem\", \"what\": \"mlp003\", \"precision\": \"%s\", \"samples_per_s\": %.1f, "
      "\"cuda_malloc_per_step\": %.3f, \"driver_bytes_lost_per_step\": %.1f, \"peak_bytes\": %lld, %s}\n",
      precision.c_str(), best, mallocs, lost, static_cast<long long>(cuda::memory_stats(0).peak_bytes_in_use),
      card().c_str());
  return 0;
}

// The step's products alone (forward, dW of each layer, dX of the two upper ones) through cuBLAS in
// float32 (TF32 off, or on), on random operands already on the GPU: the step's best case.
int floor(const std::string& precision) {
  const int64_t b = 1000;
  const int64_t dims[4] = {3072, 3000, 1000, 10};
  std::vector<Tensor> acts, weights, grads;
  for (int i = 0; i < 4; ++i) acts.push_back(random_tensor({b, dims[i]}, 10 + i).to(Device::cuda(0)));
  for (int i = 0; i < 3; ++i) {
    weights.push_back(random_tensor({dims[i], dims[i + 1]}, 20 + i, -0.05f, 0.05f).to(Device::cuda(0)));
    grads.push_back(Tensor::zeros({dims[i], dims[i + 1]}, DType::Float32, Device::cuda(0)));
  }
  void *stream = nullptr, *blas = nullptr;
  check(cuda::api::set_device(0), "cudaSetDevice");
  check(cuda::api::create_stream(&stream), "cudaStreamCreate");
  check(cuda::api::blas_create(&blas, stream), "cublasCreate");
  check(cuda::api::blas_set_tf32(blas, precision == "tf32"), "cublasSetMathMode");
  auto f = [](const Tensor& t) { return t.buffer<float>(); };
  cuda::enable_tensor_float_32(precision == "tf32");
  kernels::Backend& backend = kernels::backend(Device::cuda(0));
  // C = op(A)·op(B), row-major, as Dense's forward and backward ask it: straight to cuBLAS on the
  // floor's own handle, or through the backend (the GPU's handle, stream and math mode).
  auto gemm = [&](bool through_backend, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                  const Tensor& bm, int64_t ldb, Tensor& c) {
    if (through_backend) return backend.gemm(ta, tb, m, n, k, 1, f(a), lda, f(bm), ldb, 0, f(c), n);
    check(cuda::api::blas_sgemm(blas, ta, tb, m, n, k, 1, f(a), lda, f(bm), ldb, 0, f(c), n), "cublasSgemm");
  };
  struct Product {
    std::string name;
    std::function<void()> run, through_backend;
  };
  std::vector<Product> products;
  for (int i = 0; i < 3; ++i) {
    int64_t in = dims[i], out = dims[i + 1];
    std::string layer = std::to_string(i + 1);
    auto forward = [&, i, in, out](bool via) {
      gemm(via, false, false, b, out, in, acts[i], in, weights[i], out, acts[i + 1]);
    };
    auto dw = [&, i, in, out](bool via) {
      gemm(via, true, false, in, out, b, acts[i], in, acts[i + 1], out, grads[i]);
    };
    auto dx = [&, i, in, out](bool via) {
      gemm(via, false, true, b, in, out, acts[i + 1], out, weights[i], out, acts[i]);
    };
    products.push_back({"forward" + layer, [=] { forward(false); }, [=] { forward(true); }});
    products.push_back({"dW" + layer, [=] { dw(false); }, [=] { dw(true); }});
    if (i > 0) products.push_back({"dX" + layer, [=] { dx(false); }, [=] { dx(true); }});
  }
  auto both_done = [&] {  // the floor's stream and the backend's
    check(cuda::api::synchronize_stream(stream), "cudaStreamSynchronize");
    cuda::synchronize(0);
  };
  auto timed = [&](const std::function<void()>& body, int reps) {
    body();
    both_done();
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) body();
      both_done();
      best = std::min(best, seconds_since(t0) / reps);
    }
    return best;
  };
  double step = timed(
      [&] {
        for (Product& p : products) p.run();
      },
      50);
  std::string each, via;
  for (Product& p : products) {
    each += (each.empty() ? "" : ", ") + ("\"" + p.name + "\": " + std::to_string(timed(p.run, 50) * 1e3));
    via += (via.empty() ? "" : ", ") + ("\"" + p.name + "\": " + std::to_string(timed(p.through_backend, 50) * 1e3));
  }
  std::printf(
      "{\"who\": \"cublas-floor\", \"what\": \"mlp003\", \"precision\": \"%s\", \"samples_per_s\": %.1f, "
      "\"product_ms\": {%s}, \"through_backend_ms\": {%s}, %s}\n",
      precision.c_str(), static_cast<double>(b) / step, each.c_str(), via.c_str(), card().c_str());
  return 0;
}

int mlp25(const std::string& data_dir) {
  auto mnist = data::load_dataset("mnist", {.data_dir = data_dir, .flatten = true});
  Sequential model(SequentialOptions{.seed = 1});
  {
    auto on = with_device(Device::cuda(0));
    model.add(Dense(128, "relu", {.input_shape = Shape{784}}));
    model.add(Dropout(0.2f));
    model.add(Dense(10, "softmax"));
  }
  model.compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  auto epoch = [&] {
    model.fit(mnist.train.x, mnist.train.y, {.epochs = 1, .batch_size = 25, .verbose = 0});
    cuda::synchronize(0);
  };
  epoch();  // warm
  double best = 0;
  for (int rep = 0; rep < 2; ++rep) {
    auto t0 = Clock::now();
    epoch();
    best = std::max(best, static_cast<double>(mnist.train.x.dim(0)) / seconds_since(t0));
  }
  std::printf("{\"who\": \"tandem\", \"what\": \"mlp25\", \"samples_per_s\": %.1f, %s}\n", best, card().c_str());
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
      "\"wall_s\": %.2f, %s}\n",
      epoch, accuracy, seconds_since(kStart), card().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string what = argc > 1 ? argv[1] : "";
  std::string arg = argc > 2 ? argv[2] : "";
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_gpu: no GPU here: %s\n", cuda::why_none().c_str());
    return 2;
  }
  if (what == "mlp003") return mlp003(arg.empty() ? "float32" : arg);
  if (what == "floor") return floor(arg.empty() ? "float32" : arg);
  if (what == "mlp25") return mlp25(arg.empty() ? "data" : arg);
  if (what == "cnn-mnist") return cnn_mnist(arg.empty() ? "data" : arg);
  if (what == "steps") {
    Mlp003 job(3);
    job.epoch();
    return 0;
  }
  std::fprintf(stderr,
               "usage: bench_gpu mlp003 [float32|tf32|mixed_bfloat16] | floor [float32|tf32] | mlp25 DATA_DIR | "
               "cnn-mnist DATA_DIR | steps\n");
  return 2;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
