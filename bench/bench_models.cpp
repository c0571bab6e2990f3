// Training throughput of the reference models on MNIST-shaped data (60,000 × 784, random; the
// CIFAR MLP on 60,000 × 32 × 32 × 3), beside two floors: the GEMM-only floor (the same matrix
// products alone through oneDNN, no framework) and the step floor (those products, plus the
// optimizer's update moving its bytes at this host's measured bandwidth: bench_models' own
// "update_bandwidth_gb_s", a memcpy over as many bytes as the update touches, best of many; the
// update reads and writes each parameter's value, gradient and slots once a step, which no
// framework can skip). "isa" is Tandem's vector level (TANDEM_MAX_ISA caps it).
// Usage: bench_models WORKLOAD [threads] [seconds] [nofloor|floor] [STRATEGY: make_strategy's names, e.g.
// mirrored:N[:deterministic], central:N, model-parallel:N]   WORKLOAD: mlp25 mlp256 mlp5_50 mlp5_256 cnn64
// cifar_mlp256 (the floor: not for cifar_mlp256). An argument "mixed_bf16" anywhere trains under
// Keras' mixed_bfloat16 policy ("bf16_products" says whether the CPU multiplied in bf16 or fell
// back to float32).
// Prints one JSON line. Run one workload per process so that peak RSS is the workload's own.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <dnnl.h>
#include <omp.h>

#include "tandem/allocator.h"
#include "tandem/distribute/strategy.h"
#include "tandem/distribute/strategy_registry.h"
#include "tandem/tandem.h"
#include "tandem/timeline.h"

using namespace tandem;
using namespace tandem::layers;
using Clock = std::chrono::steady_clock;

namespace {

struct Workload {
  std::string name, model;
  int64_t batch;
};

std::unique_ptr<Sequential> make_model(const std::string& model) {
  auto m = std::make_unique<Sequential>();
  if (model == "mlp") {
    m->add(Dense(128, "relu", {.input_shape = Shape{784}}));
    m->add(Dropout(0.2f));
    m->add(Dense(10, "softmax"));
    m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  } else if (model == "mlp5") {
    m->add(Dense(160, "elu", {.input_shape = Shape{784}}));
    for (int i = 0; i < 4; ++i) m->add(Dense(160, "elu"));
    m->add(Dense(10));
    m->compile(optimizers::SGD(0.01f, {.momentum = 0.95f}), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  } else if (model.starts_with("cifar-mlp")) {  // the third tutorial's CIFAR-10 MLP (cifar-mlp-adam: with Adam)
    m->add(Flatten({.input_shape = Shape{32, 32, 3}}));
    m->add(Dense(3000, "relu"));
    m->add(Dense(1000, "relu"));
    m->add(Dense(10, "sigmoid"));
    if (model == "cifar-mlp-adam") m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
    else m->compile(optimizers::SGD(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  } else {
    m->add(Conv2D(32, 3, {.activation = "relu", .input_shape = Shape{28, 28, 1}}));
    m->add(MaxPooling2D());
    m->add(Flatten());
    m->add(Dense(64, "relu"));
    m->add(Dense(10));
    m->compile(optimizers::Adam(), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  }
  return m;
}

// Samples/s of the model's matrix products alone, through oneDNN's sgemm on one thread (not
// Tandem's chunked gemm): per dense layer forward, dW and (but for the first layer) dX. For the
// CNN, its dense layers plus the convolution as an im2col GEMM.
double gemm_floor(const std::string& model, int64_t b, double seconds) {
  std::vector<std::array<int64_t, 3>> layers;  // (in, out, needs dX)
  if (model == "mlp") layers = {{784, 128, 0}, {128, 10, 1}};
  else if (model == "mlp5")
    layers = {{784, 160, 0}, {160, 160, 1}, {160, 160, 1}, {160, 160, 1}, {160, 160, 1}, {160, 10, 1}};
  else layers = {{5408, 64, 1}, {64, 10, 1}};
  std::vector<std::vector<float>> x, w, y;
  for (auto [in, out, dx] : layers) {
    x.emplace_back(static_cast<size_t>(b * in), 0.5f);
    w.emplace_back(static_cast<size_t>(in * out), 0.01f);
    y.emplace_back(static_cast<size_t>(b * out), 0.1f);
  }
  // CNN: conv as GEMM (b·26·26, 9) × (9, 32) forward and dW (dX of the input is not needed).
  int64_t conv_m = b * 26 * 26;
  std::vector<float> cx(static_cast<size_t>(conv_m * 9), 0.5f), cw(9 * 32, 0.1f), cy(static_cast<size_t>(conv_m * 32));
  omp_set_num_threads(1);
  auto gemm = [](char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* bm,
                 int64_t ldb, float* c,
                 int64_t ldc) { dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, bm, ldb, 0.0f, c, ldc); };
  auto step = [&] {
    for (size_t i = 0; i < layers.size(); ++i) {
      auto [in, out, dx] = layers[i];
      gemm('N', 'N', b, out, in, x[i].data(), in, w[i].data(), out, y[i].data(), out);
      gemm('T', 'N', in, out, b, x[i].data(), in, y[i].data(), out, w[i].data(), out);
      if (dx) gemm('N', 'T', b, in, out, y[i].data(), out, w[i].data(), out, x[i].data(), in);
    }
    if (model == "cnn") {
      gemm('N', 'N', conv_m, 32, 9, cx.data(), 9, cw.data(), 32, cy.data(), 32);
      gemm('T', 'N', 9, 32, conv_m, cx.data(), 9, cy.data(), 32, cw.data(), 32);
    }
  };
  for (int i = 0; i < 5; ++i) step();
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int64_t steps = 0;
    auto t0 = Clock::now();
    double elapsed = 0;
    while (elapsed < seconds / 3) {
      step();
      ++steps;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    best = std::max(best, static_cast<double>(steps * b) / elapsed);
  }
  return best;
}

// Bytes the optimizer's update reads and writes per parameter: Adam reads w, g, m, v and writes
// w, m, v; SGD with momentum reads w, g, v and writes w, v; plain SGD reads w, g and writes w.
double update_bytes_per_parameter(const std::string& model) {
  if (model == "mlp5") return 5 * 4;
  if (model == "cifar-mlp") return 3 * 4;
  return 7 * 4;
}

// Bytes per second a memcpy moves (read and written, counted once each) over `bytes` in all: half
// copied into the other half, in cache or memory as the update's own arrays are. Best of runs of
// about 20 ms each over `seconds`.
double copy_bandwidth(double bytes, double seconds) {
  auto half = static_cast<size_t>(bytes / 2) / 64 * 64 + 64;
  std::vector<char> from(half, 1), to(half, 2);
  double best = 0;
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    int64_t copies = 0;
    auto t0 = Clock::now();
    double elapsed = 0;
    while (elapsed < 0.02) {
      std::memcpy(to.data(), from.data(), half);
      from[static_cast<size_t>(copies) % half] ^= to[half - 1];  // the copies are not the same copy
      ++copies;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    best = std::max(best, 2.0 * static_cast<double>(half) * static_cast<double>(copies) / elapsed);
  }
  return best;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// The training's own memory: the most bytes of tensors in use at once during the steps, beyond
// what was in use as the first step began (the model's variables and the data, which fit may copy
// for its batches, stay out).
struct StepMemory : Callback {
  uint64_t base = 0, peak = 0;
  void on_batch_begin(int64_t batch, const Logs&) override {
    if (batch != 0) return;
    memory::reset_peak();
    base = memory::stats().bytes_in_use;
  }
  void on_train_end(const Logs&) override { peak = std::max(peak, memory::stats().peak_bytes_in_use - base); }
};

}  // namespace

int main(int argc, char** argv) try {
  std::vector<Workload> all = {{"mlp25", "mlp", 25},
                               {"mlp256", "mlp", 256},
                               {"mlp5_50", "mlp5", 50},
                               {"mlp5_128", "mlp5", 128},
                               {"mlp5_256", "mlp5", 256},
                               {"cnn64", "cnn", 64},
                               {"cnn128", "cnn", 128},
                               {"cnn256", "cnn", 256},
                               {"cifar_mlp256", "cifar-mlp", 256},
                               {"cifar_mlp_adam256", "cifar-mlp-adam", 256}};
  bool mixed = false;  // "mixed_bf16", wherever it stands, is taken out of the positional arguments
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "mixed_bf16") == 0) {
      mixed = true;
      std::copy(argv + i + 1, argv + argc, argv + i);
      --argc;
      break;
    }
  if (mixed) mixed_precision::set_global_policy("mixed_bfloat16");
  if (argc < 2)
    fail("usage: bench_models WORKLOAD [threads] [seconds]; WORKLOAD is mlp25, mlp256, mlp5_50, mlp5_256 or cnn64");
  auto it = std::find_if(all.begin(), all.end(), [&](const Workload& w) { return w.name == argv[1]; });
  if (it == all.end()) fail("bench_models: unknown workload \"{}\"", argv[1]);
  int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  double seconds = argc > 3 ? std::atof(argv[3]) : 6.0;
  set_num_threads(threads);

  const int64_t n = 60000;
  bool cnn = it->model == "cnn", cifar = it->model.starts_with("cifar-mlp");
  Tensor x = Tensor::empty(cnn ? Shape{n, 28, 28, 1} : cifar ? Shape{n, 32, 32, 3} : Shape{n, 784});
  Philox rng(1);
  rng.uniforms(0, x.numel(), x.data<float>());
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i)
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(rng.bits(static_cast<uint64_t>(i)) % 10);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));
  double data_mb = static_cast<double>(x.numel() * 4 + n * 4) / 1e6;

  // A fifth argument names a strategy (distribute::make_strategy), its replicas running `threads` threads each.
  std::unique_ptr<distribute::Strategy> strategy = distribute::make_strategy(argc > 5 ? argv[5] : "default", threads);
  std::unique_ptr<Sequential> model;
  if (strategy) {
    auto scope = strategy->scope();
    model = make_model(it->model);
  } else {
    model = make_model(it->model);
  }
  // A sixth argument "timeline": the strategy records its spans, and the share of the step its
  // collectives took is printed (a model-parallel strategy's devices record them).
  Timeline timeline;
  bool timed = argc > 6 && std::strcmp(argv[6], "timeline") == 0;
  if (timed) {
    if (!strategy) fail("bench_models: a timeline needs a strategy");
    strategy->extended().set_timeline(&timeline);
  }
  // Train on slices of the data sized to run about `seconds`/3, three times; report the best.
  int64_t per_run = std::min<int64_t>(n, it->batch * 40);
  auto step_memory = std::make_shared<StepMemory>();
  model->fit(x.slice(0, per_run), y.slice(0, per_run),
             {.epochs = 1, .batch_size = it->batch, .callbacks = {step_memory}, .verbose = 0});  // warm-up
  auto t0 = Clock::now();
  model->fit(x.slice(0, per_run), y.slice(0, per_run),
             {.epochs = 1, .batch_size = it->batch, .callbacks = {step_memory}, .verbose = 0});
  double one = std::chrono::duration<double>(Clock::now() - t0).count();
  int64_t rows =
      std::min<int64_t>(n, std::max<int64_t>(it->batch, static_cast<int64_t>(per_run * (seconds / 3) / one)));
  rows -= rows % it->batch;
  // Workers of a multi-worker strategy train the same rows (the fewest any of them chose).
  distribute::Communicator* workers = strategy ? strategy->extended().worker_communicator() : nullptr;
  if (workers != nullptr) workers->all_reduce(std::span<int64_t>(&rows, 1), distribute::ReduceOp::Min);
  double best = 0;
  std::string figures;  // what the runner adds to the epoch's logs (a pipeline's bubble), of the fastest run
  for (int rep = 0; rep < 3; ++rep) {
    auto start = Clock::now();
    History h = model->fit(x.slice(0, rows), y.slice(0, rows),
                           {.epochs = 1, .batch_size = it->batch, .callbacks = {step_memory}, .verbose = 0});
    double speed = static_cast<double>(rows) / std::chrono::duration<double>(Clock::now() - start).count();
    if (speed <= best) continue;
    best = speed;
    figures.clear();
    for (const char* name : {"bubble", "bubble_ideal"})
      if (h.history.contains(name)) figures += fmt::format(", \"{}\": {:.4f}", name, h.history[name].back());
  }
  double rss = peak_rss_mb();
  double training_mb = static_cast<double>(step_memory->peak) / 1e6;
  if (timed) {
    auto totals = timeline.totals();
    double step = totals["forward"].seconds + totals["backward"].seconds + totals["update"].seconds;
    double collectives = totals["all_reduce"].seconds + totals["all_gather"].seconds;
    std::printf("{\"timeline\": \"%s %s\", \"collectives_share_of_step\": %.4f}\n", it->name.c_str(),
                strategy->name().c_str(), step > 0 ? collectives / step : 0.0);
  }
  // A fourth argument "nofloor" skips the floors, for profiling the framework alone.
  bool floors = !(argc > 4 && std::strcmp(argv[4], "nofloor") == 0) && !cifar;
  double floor = floors ? gemm_floor(it->model, it->batch, 3.0) : 1.0;
  if (floors) {
    int64_t parameters = 0;
    for (Variable* v : model->variables())
      if (v->trainable) parameters += v->value.numel();
    double update_bytes = static_cast<double>(parameters) * update_bytes_per_parameter(it->model);
    double bandwidth = copy_bandwidth(update_bytes, 1.0);
    double step_seconds = static_cast<double>(it->batch) / floor + update_bytes / bandwidth;
    double step_floor = static_cast<double>(it->batch) / step_seconds;
    figures += fmt::format(
        ", \"parameters\": {}, \"update_bytes\": {:.0f}, \"update_bandwidth_gb_s\": {:.1f}, "
        "\"step_floor_samples_per_s\": "
        "{:.0f}, \"fraction_of_step_floor\": {:.3f}",
        parameters, update_bytes, bandwidth / 1e9, step_floor, best / step_floor);
  }
  if (strategy && !strategy->extended().is_chief()) return 0;  // the chief reports for every worker
  std::printf(
      "{\"workload\": \"%s\", \"strategy\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"samples_per_s\": %.0f, "
      "\"peak_rss_mb\": %.1f, \"data_mb\": %.1f, \"peak_training_mb\": %.1f, \"gemm_floor_samples_per_s\": %.0f, "
      "\"fraction_of_floor\": %.3f, \"precision\": \"%s\", \"bf16_products\": %s%s}\n",
      it->name.c_str(), strategy ? strategy->name().c_str() : "default", threads, cpu_isa().c_str(), best, rss, data_mb,
      training_mb, floor, best / floor, mixed ? "mixed_bf16" : "float32",
      mixed && ops::has_bf16_products(Device::cpu()) ? "true" : "false", figures.c_str());
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
