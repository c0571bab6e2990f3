#pragma once
// The MPI tests' shared pieces: the skip where MPI is missing, and tests/distribute/mpi_check.cpp
// started under `tandem launch` on loopback, under a watchdog.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
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
