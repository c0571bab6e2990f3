// ModelParallelStrategy and PipelineStrategy over processes started by `tandem launch` (one device
// each) and over 3 namespace hosts: the final checkpoint equals one process's, a rank killed or
// stopped during a step is named, a killed run resumes to the uninterrupted bits. Every run is
// under a watchdog that kills its process group. Skipped without MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "distribute/launch_util.h"
#include "distribute/netns_hosts.h"

namespace tandem::testing {
namespace {

// Every tensor of one checkpoint within 1e-5 of the other's norm (the optimizer's slots 1e-4).
void expect_close_checkpoints(const std::string& want_path, const std::string& got_path, const std::string& what) {
  auto want = final_state(want_path), got = final_state(got_path);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;
    ASSERT_EQ(got[i].second.size(), want[i].second.size()) << what << ": " << got[i].first;
    double diff = 0, norm = 0;
    for (size_t k = 0; k < got[i].second.size(); ++k) {
      double d = double{got[i].second[k]} - want[i].second[k];
      diff += d * d;
      norm += double{want[i].second[k]} * want[i].second[k];
    }
    double allowed = got[i].first.starts_with("optimizer/") ? 1e-4 : 1e-5;
    EXPECT_LE(std::sqrt(diff), allowed * std::sqrt(norm) + 1e-12) << what << ": " << got[i].first;
  }
}

// `tandem fit --strategy pipeline:S:M` under `tandem launch -np S` (one stage per process),
// model-parallel:T under -np T (one piece of every split layer per process), and 2 copies of
// either on 4: the final checkpoint, which rank 0 gathers from every stage or piece (its variables
// and Adam's slots), is one process's within 1e-5 of each tensor's norm (the slots 1e-4), and so
// are the test loss and accuracy printed.
TEST(SplitOverProcesses, FitUnderTheLauncherEndsWithOneProcesssWeights) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  auto args = [&](const std::string& strategy) {
    std::vector<std::string> a = fit_args(dir, strategy, dir.file("ck-" + strategy));
    a.insert(a.end(), {"--model", "mlp5", "--optimizer", "adam"});
    return a;
  };
  std::vector<std::string> one{TANDEM_CLI};
  for (const std::string& a : args("default")) one.push_back(a);
  Watched alone = run_watched(one, dir, 120);
  ASSERT_EQ(alone.code, 0) << alone.output;
  for (auto [processes, strategy] : {std::pair{2, "pipeline:2:4"}, std::pair{3, "pipeline:3:2:gpipe"},
                                     std::pair{4, "mirrored:2+pipeline:2:2"}, std::pair{2, "model-parallel:2"},
                                     std::pair{3, "model-parallel:3"}, std::pair{4, "mirrored:2+model-parallel:2"}}) {
    Watched w = run_watched(launched(processes, args(strategy)), dir, 180);
    ASSERT_EQ(w.code, 0) << strategy << "\n" << w.output;
    expect_close_checkpoints(dir.file("ck-default/final.safetensors"),
                             dir.file(fmt::format("ck-{}/final.safetensors", strategy)), strategy);
    std::string said = alone.output.substr(alone.output.find("Test loss"));
    said = said.substr(0, said.find("(") - 1);
    EXPECT_NE(w.output.find(said), std::string::npos) << strategy << ": " << said << "\n" << w.output;
  }
}

// A stage or piece killed (SIGKILL) or stopped (SIGSTOP) in the middle of a step over processes:
// a pipeline stage at its 6th send (step 2's second micro-batch, the header out and not the
// data), a model's piece as it enters its 17th collective (in training, where a step makes several),
// and once it is inside it (every rank has entered it: a stopped rank is named by the control
// plane, "stopped answering", not left to the collective's "MPI has not completed it"). The job
// ends within twice the timeout and a few seconds, naming the rank (and, killed, the phase:
// training), and leaves no process behind.
TEST(SplitOverProcesses, ARankKilledOrStoppedDuringAStepIsNamed) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  constexpr double kTimeout = 2;
  for (auto [strategy, at] : {std::pair{"pipeline:2:4", "send-6"}, std::pair{"model-parallel:2", "collective-17"},
                              std::pair{"model-parallel:2", "entered-17"}})
    for (const char* kind : {"kill", "stop"})
      for (int rank : {0, 1}) {
        std::string what = fmt::format("{}:{}:{}", kind, rank, at),
                    ck = dir.file(fmt::format("ck-{}-{}", strategy, what));
        std::string fired = dir.file(fmt::format("fired-{}-{}", strategy, what));
        Watched w = run_watched(launched(2, fit_args(dir, strategy, ck, kTimeout)), dir, 60, "fault.log",
                                {"TANDEM_TEST_FAULT=" + what, "TANDEM_TEST_FAULT_ONCE=" + fired});
        std::string where = std::string(strategy) + ", " + what;
        EXPECT_NE(w.code, 0) << where << "\n" << w.output;
        EXPECT_FALSE(w.killed) << where << ": the watchdog had to end it\n" << w.output;
        EXPECT_LT(w.seconds, 2 * kTimeout + 10) << where << "\n" << w.output;
        // By the control plane ("rank R (host H) ..."), or by the receive it holds up ("recv from rank R").
        bool named = (std::string(kind) == "kill" && names_killed_rank(w.output, rank)) ||
                     w.output.find(fmt::format("rank {} (host ", rank)) != std::string::npos ||
                     w.output.find(fmt::format("from rank {} (tag ", rank)) != std::string::npos;
        EXPECT_TRUE(named) << where << "\n" << w.output;
        if (std::string(kind) == "kill")  // a stop is named by the collective or receive it holds up
          EXPECT_NE(w.output.find("died during training"), std::string::npos) << where << "\n" << w.output;
        else if (std::string(at).starts_with("entered"))  // ... but not one every rank has entered
          EXPECT_TRUE(
              std::regex_search(w.output, std::regex(fmt::format("rank {} \\(host [^)]*\\) stopped answering", rank))))
              << where << "\n"
              << w.output;
        EXPECT_TRUE(std::filesystem::exists(fired)) << where << ": the fault never fired\n" << w.output;
        std::vector<std::string> left = processes_mentioning(dir.path());
        EXPECT_TRUE(left.empty()) << where << ": left behind: " << (left.empty() ? "" : left[0]);
        for (const std::string& p : left) kill(std::stoi(p.substr(0, p.find(':'))), SIGKILL);
      }
}

// Split over 2 processes, rank 0 killed (SIGKILL) as it starts writing the checkpoint of epoch 1
// (backups every 3 steps before it): the same command resumes from the backup, every process
// loading the whole state and keeping its stage's or piece's part, and ends with the bits of a
// run never interrupted.
TEST(SplitOverProcesses, KilledThenResumedEndsWithTheUninterruptedBits) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  for (const char* strategy : {"pipeline:2:4", "model-parallel:2"}) {
    std::string reference = dir.file(fmt::format("reference-{}", strategy)),
                ck = dir.file(fmt::format("killed-{}", strategy));
    Watched whole = run_watched(launched(2, fit_args(dir, strategy, reference)), dir, 120, "ref.log");
    ASSERT_EQ(whole.code, 0) << strategy << "\n" << whole.output;
    Watched killed = run_watched(launched(2, fit_args(dir, strategy, ck)), dir, 120, "killed.log",
                                 {"TANDEM_TEST_FAULT=kill:0:checkpoint-writing"});
    EXPECT_NE(killed.code, 0) << strategy;
    EXPECT_FALSE(killed.killed) << strategy << "\n" << killed.output;
    ASSERT_TRUE(std::filesystem::exists(ck + "/backup/backup.safetensors")) << strategy << "\n" << killed.output;
    ASSERT_FALSE(std::filesystem::exists(ck + "/final.safetensors")) << strategy;
    Watched resumed = run_watched(launched(2, fit_args(dir, strategy, ck)), dir, 120, "resumed.log");
    ASSERT_EQ(resumed.code, 0) << strategy << "\n" << resumed.output;
    expect_same_final_weights(reference + "/final.safetensors", ck + "/final.safetensors",
                              std::string(strategy) + ", resumed");
  }
}

// A model cut into 3 stages, and split 3 ways, over 3 hosts (network namespaces, as above): one
// process's final checkpoint within 1e-5.
TEST(SplitOverProcesses, ThreeHostsAsNetworkNamespacesTrainAsOneProcess) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  Namespaces hosts(dir);
  if (!hosts.ok()) GTEST_SKIP() << "skipped: network namespaces are not available here: " << hosts.why();
  make_mnist(dir.file("data/mnist"), 600, 60);
  auto args = [&](const std::string& strategy) {
    std::vector<std::string> a = fit_args(dir, strategy, dir.file("ck-" + strategy));
    a.insert(a.end(), {"--model", "mlp5"});
    return a;
  };
  std::vector<std::string> one{TANDEM_CLI};
  for (const std::string& a : args("default")) one.push_back(a);
  ASSERT_EQ(run_watched(one, dir, 120, "one.log").code, 0);
  for (const char* strategy : {"pipeline:3:2", "model-parallel:3"}) {
    std::vector<std::string> across = args(strategy);
    across.push_back("--insecure");  // ranks on several machines: a network the test trusts
    Watched w = run_watched(hosts.launch(dir, across), dir, 180);
    ASSERT_EQ(w.code, 0) << strategy << "\n" << w.output;
    expect_close_checkpoints(dir.file("ck-default/final.safetensors"),
                             dir.file(fmt::format("ck-{}/final.safetensors", strategy)),
                             std::string(strategy) + ", 3 hosts");
  }
}

}  // namespace
}  // namespace tandem::testing
