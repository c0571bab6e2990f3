// The MPI communicator across processes, started with `tandem launch` on loopback: every
// collective on 2 and 3 ranks, and each failure ending every rank within the timeout with a
// message naming the rank (tests/distribute/mpi_check.cpp runs the scenarios). Skipped, with the
// reason, where the build has no MPI or mpirun is missing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>

#include "distribute/launch_util.h"

namespace tandem::testing {
namespace {

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

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

// After a repeated step, the ranks no longer exchange their calls before each collective
// (mpi_calls.h): a call that differs from the expected one is still named, on every rank, with
// both sides, and a change every rank makes alike (a smaller last batch) is no mismatch.
TEST(MpiFailures, AMismatchWhereTheRanksExpectACallIsNamedOnEveryRank) {
  SKIP_WITHOUT_MPI();
  struct Case {
    int ranks;
    std::string how, rank1_calls;
  };
  for (const Case& c : {Case{2, "size", "calls all_reduce of 99 float32 values (sum)"},
                        Case{3, "size", "calls all_reduce of 99 float32 values (sum)"},
                        Case{2, "kind", "calls broadcast of 100 float32 values from rank 0"}}) {
    TempDir dir;
    Watched w = launch_check(dir, c.ranks, "mismatch-expected", 20000, {c.how});
    EXPECT_NE(w.code, 0) << w.output;
    EXPECT_FALSE(w.killed) << w.output;
    EXPECT_EQ(w.output.find("the mismatch went unseen"), std::string::npos) << w.output;
    EXPECT_EQ(w.output.find("FAILED"), std::string::npos) << w.output;
    // Every rank's own error names the collective (#25: six steps of four, then this one) and both
    // calls: ranks 0 and 1 each other, rank 2 rank 1.
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    auto side = [&](int rank) {
      return fmt::format("rank {} (host {}) {}", rank, host,
                         rank == 1 ? c.rank1_calls : "calls all_reduce of 100 float32 values (sum)");
    };
    std::string first = fmt::format("error: ranks disagree at collective #25: {}, {}", side(0), side(1));
    std::string third = fmt::format("error: ranks disagree at collective #25: {}, {}", side(1), side(2));
    EXPECT_EQ(count_of(w.output, first), 2) << c.ranks << " ranks, " << c.how << "\n" << w.output;
    EXPECT_EQ(count_of(w.output, third), c.ranks - 2) << c.ranks << " ranks, " << c.how << "\n" << w.output;
  }
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
