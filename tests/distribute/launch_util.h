#pragma once
// The MPI tests' shared pieces: the skip where MPI is missing, and tests/distribute/mpi_check.cpp
// started under `tandem launch` on loopback, under a watchdog.
#include <gtest/gtest.h>

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

// Every rank printed "rank R: <what>".
inline void expect_every_rank(const Watched& w, int ranks, const std::string& what) {
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(w.output.find(fmt::format("rank {}: {}", r, what)), std::string::npos) << w.output;
}

}  // namespace tandem::testing
