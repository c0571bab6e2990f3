#pragma once
// What the parameter-server cluster tests share: a cluster under `tandem launch --ps P --workers W`
// (watched), two runs' final weights compared, and a command's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_util.h"

namespace tandem::testing {

// `command`'s standard output, trailing newlines dropped.
inline void run_command_output(const std::string& command, std::string* out) {
  out->clear();
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[256];
  while (pipe != nullptr && std::fgets(buffer, sizeof buffer, pipe) != nullptr) *out += buffer;
  if (pipe != nullptr) pclose(pipe);
  while (!out->empty() && out->back() == '\n') out->pop_back();
}

// A pgrep pattern for `path` that the shell running pgrep does not match itself.
inline std::string unquoted_pattern(const std::string& path) { return "[" + path.substr(0, 1) + "]" + path.substr(1); }

inline Watched launch_cluster(const TempDir& dir, int servers, int workers, const std::vector<std::string>& fit_args,
                              const std::string& log, double limit_s = 120, const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{
      TANDEM_CLI, "launch",   "--ps", std::to_string(servers), "--workers", std::to_string(workers),
      "--",       TANDEM_CLI, "fit"};
  argv.insert(argv.end(), fit_args.begin(), fit_args.end());
  return run_watched(argv, dir, limit_s, log, env);
}

inline void expect_same_state(const std::string& a, const std::string& b, double tolerance, const std::string& what) {
  auto x = final_state(a), y = final_state(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].first, y[i].first) << what;
    if (x[i].first.starts_with("metric") || x[i].first == "optimizer/iterations") continue;
    if (tolerance == 0) {
      EXPECT_EQ(x[i].second, y[i].second) << what << ": " << x[i].first;
      continue;
    }
    // Relative to the tensor's scale: elementwise, Adam's normalized steps magnify the last bits of
    // gradients near zero, which the order of a sum changes.
    float scale = 0;
    for (float v : x[i].second) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < x[i].second.size(); ++k)
      ASSERT_LE(std::fabs(x[i].second[k] - y[i].second[k]), tolerance * scale)
          << what << ": " << x[i].first << "[" << k << "] of a tensor whose largest magnitude is " << scale;
  }
}

}  // namespace tandem::testing
