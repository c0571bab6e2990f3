// tandem compare --predict: measures the model's compute time per step here (one worker's batch,
// the threads a worker would have), then predicts each worker count and link speed:
//   all-reduce  t_ar = 2(n−1)/n · S/B + 2(n−1) · α  (ring; S the gradient bytes, α one hop's latency)
//   step        t = t_c + t_ar − min(h · t_ar, t_b)  (h: the fraction a timeline showed hidden, at most
//               the backward time t_b ≈ 2/3 · t_c)
//   samples/s   n · b / t; scaling efficiency t_c / t.
// Workers that share `--cores` cores (namespace hosts on this machine) compute
// max(1, n · threads / cores) times slower.
#include "cli/predict.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

namespace tandem::cli {

double parse_rate(const std::string& rate) {
  auto [n, unit] = number_and_unit(rate).value_or(std::make_pair(0.0, std::string()));
  double scale = unit == "gbit" ? 1e9 : unit == "mbit" ? 1e6 : unit == "kbit" ? 1e3 : unit == "bit" ? 1 : 0;
  if (scale == 0 || !(n > 0)) fail("--bandwidth \"{}\": expected a rate such as 10gbit, 100mbit or 25gbit", rate);
  return n * scale;
}

double ring_allreduce_seconds(double bytes, int workers, double bits_per_second, double latency_s) {
  if (workers <= 1) return 0.0;
  double n = workers;
  return 2.0 * (n - 1.0) / n * bytes * 8.0 / bits_per_second + 2.0 * (n - 1.0) * latency_s;
}

namespace {

// Seconds per training step of `model` at batch `batch` on this thread's cores: the best of
// three timings of `steps` steps, after one warm-up pass.
double compute_seconds(const CommonFlags& common, int steps) {
  ModelSpec spec = make_model(common.model, common.seed);
  Model& model = *spec.model;
  const std::optional<Shape> first = model.declared_input_shape();
  if (!first) fail("--predict: the model \"{}\" declares no input shape to time it with", common.model);
  Shape shape{common.batch_size * steps};
  for (int64_t d : *first) shape.push_back(d);
  Tensor x = Tensor::full(shape, 0.5f);
  std::vector<int32_t> labels(static_cast<size_t>(shape[0]));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  Tensor y = Tensor::from_vector({shape[0]}, std::span<const int32_t>(labels));
  model.compile(make_optimizer(choose_optimizer("", 0.0f, -1.0f, spec)), spec.loss);
  FitOptions options{.epochs = 1, .batch_size = common.batch_size, .shuffle = false, .verbose = 0};
  model.fit(x, y, options);  // warm-up: kernels chosen, memory pooled
  double best = 1e300;
  for (int round = 0; round < 3; ++round) {
    auto start = std::chrono::steady_clock::now();
    model.fit(x, y, options);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps);
  }
  return best;
}

double hidden_from(const PredictFlags& f) {
  if (f.timeline.empty()) return f.overlap;
  auto trace = nlohmann::json::parse(io::read_file(f.timeline), nullptr, false);
  if (trace.is_discarded() || !trace.contains("traceEvents"))
    fail("--timeline {}: not a Chrome trace written by tandem fit --timeline", f.timeline);
  std::map<std::string, Timeline::Total> totals;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X") totals[e.value("name", "")].seconds += e.value("dur", 0.0) / 1e6;
  return hidden_fraction(totals);
}

}  // namespace

void PredictFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--predict", workers,
                 "instead of training: predict samples/s and scaling efficiency at these worker counts "
                 "(comma-separated, e.g. 8,64,512), from the model's step time measured here");
  cmd.add_option("--bandwidth", bandwidth, "with --predict: each worker's link, comma-separated (e.g. 10gbit,100gbit)")
      ->capture_default_str();
  cmd.add_option("--latency-us", latency_us, "with --predict: one hop's latency in microseconds")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd.add_option("--overlap", overlap, "with --predict: the fraction of the all-reduce hidden behind backward")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--timeline", timeline, "with --predict: take --overlap from this trace of tandem fit --timeline");
  cmd.add_option("--cores", cores,
                 "with --predict: the workers share this many cores (hosts as namespaces on one machine; 0: each "
                 "its own machine)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--compression", compression, "with --predict: gradients on the wire: none, fp16 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp16", "bf16"}));
  cmd.add_option("--steps", steps, "with --predict: steps timed")->capture_default_str()->check(CLI::Range(3, 100000));
}

void run_predict(const CommonFlags& common, const PredictFlags& f) {
  common.apply();
  std::vector<int> counts;
  for (const std::string& w : split(f.workers, ',')) {
    int n = 0;
    try {
      n = std::stoi(w);
    } catch (const std::exception&) {
    }
    if (n < 1) fail("--predict \"{}\": expected worker counts such as 8,64,512", f.workers);
    counts.push_back(n);
  }
  std::vector<double> rates;
  for (const std::string& b : split(f.bandwidth, ',')) rates.push_back(parse_rate(b));
  double hidden = hidden_from(f);
  ModelSpec spec = make_model(common.model, common.seed);
  double bytes = static_cast<double>(spec.model->count_params()) * (f.compression == "none" ? 4.0 : 2.0);
  double compute = compute_seconds(common, f.steps);
  int threads = num_threads();
  std::printf(
      "%s: %.0f gradient bytes per step; one worker's step (batch %lld, %d thread%s) measured %.3f ms; %.0f%% "
      "of the all-reduce hidden\n",
      common.model.c_str(), bytes, static_cast<long long>(common.batch_size), threads, threads == 1 ? "" : "s",
      compute * 1e3, hidden * 100);
  std::printf("%8s %10s %12s %14s %12s %14s %11s\n", "workers", "link", "compute ms", "all-reduce ms", "exposed ms",
              "samples/s", "efficiency");
  for (double rate : rates)
    for (int n : counts) {
      double shared = f.cores > 0 ? std::max(1.0, static_cast<double>(n) * threads / f.cores) : 1.0;
      double t_c = compute * shared;
      double t_ar = ring_allreduce_seconds(bytes, n, rate, f.latency_us * 1e-6);
      double exposed = t_ar - std::min(hidden * t_ar, t_c * 2.0 / 3.0);
      double step = t_c + exposed;
      std::printf("%8d %9.4gG %12.3f %14.3f %12.3f %14.0f %10.1f%%\n", n, rate / 1e9, t_c * 1e3, t_ar * 1e3,
                  exposed * 1e3, static_cast<double>(n * common.batch_size) / step, 100.0 * compute / step);
    }
}

}  // namespace tandem::cli
