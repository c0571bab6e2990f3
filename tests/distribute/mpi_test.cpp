// The MPI communicator across processes, started with `tandem launch` on loopback: every
// collective on 2 and 3 ranks, and each failure ending every rank within the timeout with a
// message naming the rank (tests/distribute/mpi_check.cpp runs the scenarios). Skipped, with the
// reason, where the build has no MPI or mpirun is missing.
#include <gtest/gtest.h>

#include <cstdlib>

#include "distribute/launch_util.h"

namespace tandem::testing {
namespace {

TEST(MpiCommunicator, EveryCollectiveOnTwoAndThreeRanks) {
  SKIP_WITHOUT_MPI();
  expect_scenario({2, 3}, "collectives", "ok");
}

TEST(MpiFailures, MismatchedSizesNameBothRanksAndValues) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  Watched w = launch_check(dir, 2, "mismatch", 20000);
  EXPECT_NE(w.code, 0);
  EXPECT_FALSE(w.killed) << w.output;
  EXPECT_NE(w.output.find("ranks disagree at collective #1: rank 0 (host "), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("calls all_reduce of 100 float32 values (sum), rank 1 (host "), std::string::npos)
      << w.output;
  EXPECT_NE(w.output.find("calls all_reduce of 99 float32 values"), std::string::npos) << w.output;
}

TEST(MpiFailures, ReceiveOfAnotherSizeNamesBoth) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  Watched w = launch_check(dir, 2, "p2p-mismatch", 20000);
  EXPECT_NE(w.code, 0);
  EXPECT_NE(w.output.find("recv from rank 0 (tag 0): expected 7 float32 values, rank 0 sent 8 float32 values"),
            std::string::npos)
      << w.output;
}

// Alive (beating) but never arriving: the others name it from its progress, within the timeout.
TEST(MpiFailures, StuckRankIsNamedWithinTheTimeout) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  Watched w = launch_check(dir, 3, "stuck", 2000);
  EXPECT_NE(w.code, 0);
  EXPECT_FALSE(w.killed) << w.output;
  EXPECT_LT(w.seconds, 20.0);
  EXPECT_NE(w.output.find("rank 2 (host "), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("has not entered it (its last: #1, during running)"), std::string::npos) << w.output;
}

TEST(MpiFailures, KilledRankIsNamed) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  Watched w = launch_check(dir, 3, "die", 20000);
  EXPECT_NE(w.code, 0);
  EXPECT_FALSE(w.killed) << w.output;
  EXPECT_TRUE(names_killed_rank(w.output, 1)) << w.output;
}

TEST(MpiFailures, StoppedRankIsNamedWithinTheTimeout) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  Watched w = launch_check(dir, 3, "stop", 2000);
  EXPECT_NE(w.code, 0);
  EXPECT_FALSE(w.killed) << w.output;
  EXPECT_LT(w.seconds, 20.0);
  EXPECT_NE(w.output.find("rank 1 (host "), std::string::npos) << w.output;
}

}  // namespace
}  // namespace tandem::testing
