#pragma once
// Keras' per-epoch progress bar: redrawn in place on a terminal (at most ten times a second),
// one line per epoch otherwise.
#include <chrono>
#include <cstdio>

#include "tandem/callbacks.h"

namespace tandem::train {

class ProgressBar {
 public:
  ProgressBar(int64_t total_steps, int verbose, std::FILE* out);  // total_steps <= 0: unknown
  // Whether update(step, …) would draw: callers build the logs only then.
  bool due(int64_t step) const;
  // After step `step` (1-based) with the running logs.
  void update(int64_t step, const Logs& logs);
  void finish(int64_t steps, const Logs& logs);  // the epoch's closing line, with validation values

 private:
  void draw(int64_t step, const Logs& logs, bool final);
  int64_t total_;
  int verbose_;
  bool terminal_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tandem::train
