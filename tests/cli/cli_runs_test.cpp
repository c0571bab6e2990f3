// Runs on disk: each run's directory, checkpoints never mixed between runs, a diverging run that
// stops and fails, and a fit killed with SIGKILL that, run again, resumes from its backup and ends
// with the weights of an uninterrupted run.
#include <signal.h>

#include <chrono>
#include <thread>

#include "cli/cli_util.h"

namespace tandem {
namespace {

using testing::final_state;
using testing::make_mnist;
using testing::Outcome;
using testing::run;
using testing::spawn;
using testing::wait_exit;

// Issue 11, item 6: each run gets a directory of its own under runs/ (checkpoints and logs), said
// at the start with how to resume it; naming it again reaches the same checkpoints (before, every
// run wrote ./checkpoints and ./logs).
TEST(Cli, EachRunGetsADirectoryOfItsOwn) {
  testing::TempDir dir;
  make_mnist(dir.file("mnist"), 300, 100);
  std::vector<std::string> fit{"fit", "--data-dir", dir.path(), "--epochs", "1", "--verbose", "1"};
  for (int n : {1, 2}) {
    Outcome r = run(fit, dir);
    ASSERT_EQ(r.code, 0) << r.output;
    std::string run_dir = "runs/mlp-" + std::to_string(n);
    EXPECT_NE(r.output.find(
                  "Run directory: " + run_dir + " (checkpoints: " + run_dir + "/checkpoints, logs: " + run_dir +
                  "/logs). If this run is interrupted, the same command with --run-dir " + run_dir + " resumes it."),
              std::string::npos)
        << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir.file(run_dir + "/checkpoints/final.safetensors")));
    EXPECT_TRUE(std::filesystem::exists(dir.file(run_dir + "/logs/train")));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("checkpoints")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("logs")));
  fit.insert(fit.end(), {"--run-dir", "runs/mlp-1"});
  Outcome r = run(fit, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(
      r.output.find("--checkpoint-dir \"runs/mlp-1/checkpoints\" holds the checkpoints of an earlier, finished run"),
      std::string::npos)
      << r.output;
}

// Issue 11, item 3: a second run into a checkpoint directory that holds a finished run's
// checkpoints is refused; with --overwrite it replaces them, leaving none of the earlier run's
// (before, ckpt-01/02 and final were overwritten and the earlier ckpt-03 remained beside them).
TEST(Cli, AFinishedRunsCheckpointsAreNotMixedWithANewRun) {
  testing::TempDir dir;
  make_mnist(dir.file("mnist"), 300, 100);
  auto fit = [&](const std::string& epochs, bool overwrite) {
    std::vector<std::string> args{"fit",          "--data-dir", dir.path(), "--epochs",  epochs, "--checkpoint-dir",
                                  dir.file("ck"), "--log-dir",  "",         "--verbose", "0"};
    if (overwrite) args.push_back("--overwrite");
    return run(args, dir);
  };
  Outcome r = fit("3", false);
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir.file("ck/ckpt-03.safetensors")));
  r = fit("1", false);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(
      r.output.find(
          "holds the checkpoints of an earlier, finished run (checkpoint, ckpt-01.safetensors, ckpt-02.safetensors, "
          "ckpt-03.safetensors, final.safetensors); train into another --checkpoint-dir, remove them, or pass "
          "--overwrite"),
      std::string::npos)
      << r.output;
  r = fit("1", true);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("ck/ckpt-01.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/ckpt-03.safetensors")))
      << "the earlier run's checkpoint left beside this one";
}

// Issue 11, item 4: a diverging run stops at the first non-finite loss, says so once, writes no
// final checkpoint and exits non-zero; non-finite flags are refused.
TEST(Cli, ADivergingRunStopsOnceWritesNoFinalAndFails) {
  testing::TempDir dir;
  make_mnist(dir.file("mnist"), 600, 100);
  Outcome r = run({"fit", "--model", "mlp5", "--optimizer", "sgd", "--learning-rate", "100", "--epochs", "2",
                   "--data-dir", dir.path(), "--checkpoint-dir", dir.file("ck"), "--log-dir", "", "--verbose", "0"},
                  dir);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("training diverged: the loss is not finite at epoch 1, batch"), std::string::npos)
      << r.output;
  size_t first = r.output.find("TerminateOnNaN:");
  EXPECT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("TerminateOnNaN:", first + 1), std::string::npos) << "said more than once: " << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/final.safetensors")));
  for (const char* flag : {"--learning-rate", "--momentum", "--lr-decay", "--validation-split"})
    for (const char* value : {"nan", "inf"}) {
      r = run({"fit", "--data-dir", dir.path(), flag, value}, dir);
      EXPECT_NE(r.code, 0) << flag << " " << value;
      EXPECT_NE(r.output.find(std::string(flag) + ": "), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(std::string("not a finite number: ") + value), std::string::npos) << r.output;
    }
}

TEST(Cli, SigkillMidEpochThenRerunEndsWithTheSameWeightsBitwise) {
  testing::TempDir dir;
  make_mnist(dir.file("data/mnist"), 20000, 200);
  auto args = [&](const std::string& ckpt) {
    return std::vector<std::string>{"fit",          "--data-dir", dir.file("data"), "--epochs",  "3",
                                    "--batch-size", "10",         "--backup-every", "50",        "--checkpoint-dir",
                                    ckpt,           "--log-dir",  dir.file("logs"), "--threads", "1",
                                    "--seed",       "5",          "--verbose",      "0"};
  };
  ASSERT_EQ(run(args(dir.file("reference")), dir).code, 0) << io::read_file(dir.file("out.log"));

  // Start the same training elsewhere and kill it once a backup from inside epoch 2 exists.
  std::string backup = dir.file("killed/backup/backup.safetensors");
  pid_t pid = spawn(args(dir.file("killed")), dir.file("killed.log"));
  bool mid_epoch = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!mid_epoch && std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(backup)) {
      try {
        auto meta = io::load_safetensors(backup).metadata;
        mid_epoch = meta["epoch"] == "1" && meta["step"] != "0";
      } catch (const Error&) {
      }
    }
    if (!mid_epoch) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  kill(pid, SIGKILL);
  int code = wait_exit(pid);
  ASSERT_TRUE(mid_epoch) << "no mid-epoch backup appeared";
  ASSERT_EQ(code, 128 + SIGKILL) << "the run finished before it was killed";
  ASSERT_FALSE(std::filesystem::exists(dir.file("killed/final.safetensors")));

  Outcome resumed = run(args(dir.file("killed")), dir);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  auto a = final_state(dir.file("reference/final.safetensors"));
  auto b = final_state(dir.file("killed/final.safetensors"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second, b[i].second) << a[i].first << " differs";
  }
}

// The fault hooks are the test build's only (build/tandem-test): the release command trains
// through a fault setting that the test build obeys (here a malformed straggler, which the test
// build refuses by name).
TEST(Cli, TheReleaseCommandHasNoFaultHooks) {
  testing::TempDir dir;
  make_mnist(dir.file("data/mnist"), 60, 10);
  std::vector<std::string> args{"fit",       "--epochs", "1",          "--verbose",          "0",
                                "--log-dir", "",         "--strategy", "ps-sync:1x1:threads"};
  std::vector<std::string> faults{"TANDEM_TEST_PS_SLOW_WORKER=bad", "TANDEM_TEST_FAULT=kill:0:training"};
  std::vector<std::string> release{TANDEM_RELEASE_CLI}, test{TANDEM_CLI};
  release.insert(release.end(), args.begin(), args.end());
  test.insert(test.end(), args.begin(), args.end());
  release.insert(release.end(), {"--checkpoint-dir", "release"});
  test.insert(test.end(), {"--checkpoint-dir", "test"});
  testing::Watched plain = testing::run_watched(release, dir, 120, "release.log", faults);
  EXPECT_EQ(plain.code, 0) << plain.output;
  testing::Watched hooked = testing::run_watched(test, dir, 120, "test.log", faults);
  EXPECT_NE(hooked.code, 0) << hooked.output;
  EXPECT_NE(hooked.output.find("TANDEM_TEST_PS_SLOW_WORKER: expected INDEX:MILLISECONDS, got \"bad\""),
            std::string::npos)
      << hooked.output;
}

}  // namespace
}  // namespace tandem
