#pragma once
// tandem compare --predict: how a model would scale over more workers and slower links than this
// machine has, from its compute time per step measured here and a ring all-reduce's cost.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/common.h"

namespace tandem::cli {

struct PredictFlags {
  std::string workers;               // "8,64,512"; "": no prediction
  std::string bandwidth = "10gbit";  // per worker link, tc's units, comma-separated
  double latency_us = 50.0;          // per message of the ring (one hop)
  double overlap = 0.0;              // fraction of the all-reduce hidden behind backward (from a timeline)
  std::string timeline;              // or read from this trace (tandem fit --timeline)
  int cores = 0;  // the workers share this many cores (namespace hosts on one machine); 0: a machine each
  std::string compression = "none";
  int steps = 30;  // steps timed
  void add_to(CLI::App& cmd);
};

// One prediction: per-worker batch `batch`, `workers` workers on links of `bits_per_second`.
struct Prediction {
  int workers = 1;
  double bits_per_second = 0;
  double compute_s = 0, allreduce_s = 0, exposed_s = 0, step_s = 0, samples_per_second = 0, efficiency = 1;
};
// The ring all-reduce of `bytes` over `workers` workers: 2(n−1)/n · bytes / bandwidth + 2(n−1) · latency.
double ring_allreduce_seconds(double bytes, int workers, double bits_per_second, double latency_s);
// Bits per second of "10gbit", "100mbit", "25gbit".
double parse_rate(const std::string& rate);

void run_predict(const CommonFlags& common, const PredictFlags& flags);

}  // namespace tandem::cli
