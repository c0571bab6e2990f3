#pragma once
// The MPI tests' shared pieces: the skip where MPI is missing, and tests/distribute/mpi_check.cpp
// started under `tandem launch` on loopback, under a watchdog.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_util.h"
#include "tandem/collectives/mpi.h"

#define SKIP_WITHOUT_MPI()                                                                        \
  do {                                                                                            \
    if (std::string why = why_no_mpi(distribute::mpi_built()); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

namespace tandem::testing {

// tandem_mpi_check SCENARIO TIMEOUT_MS ARGS... on `ranks` processes.
inline Watched launch_check(const TempDir& dir, int ranks, const std::string& scenario, int timeout_ms,
                            const std::vector<std::string>& args = {}, double limit_s = 120) {
  std::vector<std::string> argv{TANDEM_CLI, "launch",         "-np",    std::to_string(ranks),
                                "--",       TANDEM_MPI_CHECK, scenario, std::to_string(timeout_ms)};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_watched(argv, dir, limit_s);
}

// A rank killed with SIGKILL is named with its host, by the other ranks ("rank 1 (host vm) died:
// its control connection closed …") or, when mpirun ends them first, by mpirun ("process rank 1
// with PID … on node vm exited on signal 9").
inline bool names_killed_rank(const std::string& output, int rank) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  bool ours = output.find(fmt::format("rank {} (host {}) died", rank, host)) != std::string::npos;
  size_t at = output.find(fmt::format("process rank {} with PID", rank));
  bool mpirun = at != std::string::npos &&
                output.find(fmt::format("on node {} exited on signal 9", host), at) != std::string::npos;
  return ours || mpirun;
}

// `tandem fit` on the generated MNIST under dir/data: 2 epochs of 10 batches of 60, backups every
// 3 steps into `checkpoints`, 1 thread, seed 5, quiet, the failure timeout given.
inline std::vector<std::string> fit_args(const TempDir& dir, const std::string& strategy,
                                         const std::string& checkpoints, double timeout = 20) {
  return {"fit",
          "--data-dir",
          dir.file("data"),
          "--epochs",
          "2",
          "--batch-size",
          "60",
          "--strategy",
          strategy,
          "--backup-every",
          "3",
          "--checkpoint-dir",
          checkpoints,
          "--log-dir",
          "",
          "--threads",
          "1",
          "--seed",
          "5",
          "--timeout",
          fmt::format("{}", timeout),
          "--verbose",
          "0"};
}

inline std::vector<std::string> launched(int workers, std::vector<std::string> fit) {
  std::vector<std::string> argv{TANDEM_CLI, "launch", "-np", std::to_string(workers), "--", TANDEM_CLI};
  argv.insert(argv.end(), fit.begin(), fit.end());
  return argv;
}

inline void expect_same_final_weights(const std::string& a_path, const std::string& b_path, const std::string& what) {
  auto a = final_state(a_path), b = final_state(b_path);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second, b[i].second) << what << ": " << a[i].first << " differs";
}

// The processes whose command line mentions `text` (other than this one), after up to 2 s for
// them to go.
inline std::vector<std::string> processes_mentioning(const std::string& text) {
  std::vector<std::string> found;
  for (int tries = 0; tries < 20; ++tries) {
    found.clear();
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::string pid = entry.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(getpid())) continue;
      std::string cmdline;
      try {
        cmdline = io::read_file(entry.path().string() + "/cmdline");
      } catch (const std::exception&) {
        continue;  // gone meanwhile
      }
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      if (cmdline.find(text) != std::string::npos) found.push_back(pid + ": " + cmdline);
    }
    if (found.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return found;
}

// Every rank printed "rank R: <what>".
inline void expect_every_rank(const Watched& w, int ranks, const std::string& what) {
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(w.output.find(fmt::format("rank {}: {}", r, what)), std::string::npos) << w.output;
}

// The check scenario on each of `rank_counts` ranks: it ends well and every rank printed "rank R: <what>".
inline void expect_scenario(std::initializer_list<int> rank_counts, const std::string& scenario,
                            const std::string& what, const std::vector<std::string>& args = {}) {
  for (int ranks : rank_counts) {
    TempDir dir;
    Watched w = launch_check(dir, ranks, scenario, 20000, args);
    ASSERT_EQ(w.code, 0) << ranks << " ranks\n" << w.output;
    expect_every_rank(w, ranks, what);
  }
}

}  // namespace tandem::testing
