// ParameterServerStrategy in one process ("ps-sync:PxW:threads": the servers and workers as
// threads of the chief's) against the same cluster under `tandem launch` (a watchdog on every
// run): synchronous training bit for bit, a record made in one replayed in the other, bounded
// staleness and backup workers as their launched tests assert, a run's backup resumed across the
// two, and what only processes can do refused by name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli/cli_util.h"
#include "distribute/ps_cluster_util.h"
#include "tandem/io.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

std::vector<std::string> fit_args(const std::string& strategy, const std::string& checkpoints,
                                  std::vector<std::string> more = {}, int epochs = 2) {
  std::vector<std::string> args{
      "--model",          "mlp",       "--strategy", strategy, "--epochs", std::to_string(epochs),
      "--threads",        "1",         "--verbose",  "2",      "--seed",   "3",
      "--checkpoint-dir", checkpoints, "--log-dir",  ""};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// `tandem fit ARGS` in this process's cluster, under the watchdog.
Watched fit_in_process(const TempDir& dir, const std::vector<std::string>& args, const std::string& log,
                       const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{TANDEM_CLI, "fit"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_watched(argv, dir, 120, log, env);
}

TEST(PsInProcess, SynchronousTrainingIsTheLaunchedClustersBitForBitOnOneAndThreeWorkers) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  for (auto [servers, workers] : {std::pair{1, 1}, std::pair{2, 3}}) {
    std::string shape = fmt::format("{}x{}", servers, workers);
    std::vector<std::string> more{"--batch-size", "32", "--shard-mb", "0.1"};  // 2 servers: the kernel split
    Watched local =
        fit_in_process(dir, fit_args("ps-sync:" + shape + ":threads", "local" + shape, more), "local" + shape + ".log");
    ASSERT_EQ(local.code, 0) << local.output;
    EXPECT_NE(local.output.find(fmt::format("worker:{} (in process): ", workers - 1)), std::string::npos)
        << local.output;
    Watched launched = launch_cluster(dir, servers, workers, fit_args("ps-sync", "launched" + shape, more),
                                      "launched" + shape + ".log");
    ASSERT_EQ(launched.code, 0) << launched.output;
    expect_same_state(dir.file("local" + shape + "/final.safetensors"),
                      dir.file("launched" + shape + "/final.safetensors"), 0, shape + ": weights and Adam's slots");
  }
}

// Asynchronous with one worker is one process, bit for bit, launched and in process (each push
// applied before the next pull; the worker's own optimizer state on the server is the model's).
TEST(PsInProcess, AsynchronousOnOneWorkerIsOneProcessBitForBitLaunchedOrInProcess) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> one{"fit"};
  for (const std::string& a : fit_args("default", "one", {"--batch-size", "32"})) one.push_back(a);
  ASSERT_EQ(run(one, dir).code, 0);
  Watched local = fit_in_process(dir, fit_args("ps-async:1x1:threads", "local", {"--batch-size", "32"}), "local.log");
  ASSERT_EQ(local.code, 0) << local.output;
  Watched launched =
      launch_cluster(dir, 1, 1, fit_args("ps-async", "launched", {"--batch-size", "32"}), "launched.log");
  ASSERT_EQ(launched.code, 0) << launched.output;
  expect_same_state(dir.file("one/final.safetensors"), dir.file("local/final.safetensors"), 0, "in process");
  expect_same_state(dir.file("one/final.safetensors"), dir.file("launched/final.safetensors"), 0, "launched");
}

// --record in one, --replay in the other: an asynchronous run of 3 workers on 2 servers, whose
// order the record forces, ends with the same bits wherever its tasks are.
TEST(PsInProcess, AnAsynchronousRecordReplaysAcrossProcessesAndThreadsBitForBit) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> more{"--batch-size", "16", "--shard-mb", "0.1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), more.begin(), more.end());
    return extra;
  };
  Watched local = fit_in_process(
      dir, fit_args("ps-async:2x3:threads", "local", with({"--record", dir.file("local.record")})), "local.log");
  ASSERT_EQ(local.code, 0) << local.output;
  Watched replayed = launch_cluster(
      dir, 2, 3, fit_args("ps-async", "replayed", with({"--replay", dir.file("local.record")})), "replayed.log");
  ASSERT_EQ(replayed.code, 0) << replayed.output;
  expect_same_state(dir.file("local/final.safetensors"), dir.file("replayed/final.safetensors"), 0,
                    "recorded in process, replayed launched");

  Watched launched = launch_cluster(
      dir, 2, 3, fit_args("ps-async", "launched", with({"--record", dir.file("launched.record")})), "launched.log");
  ASSERT_EQ(launched.code, 0) << launched.output;
  Watched back = fit_in_process(
      dir, fit_args("ps-async:2x3:threads", "back", with({"--replay", dir.file("launched.record")})), "back.log");
  ASSERT_EQ(back.code, 0) << back.output;
  expect_same_state(dir.file("launched/final.safetensors"), dir.file("back/final.safetensors"), 0,
                    "recorded launched, replayed in process");

  // A record of a run in which a task died (its "complete" false) cannot force its order again.
  std::string text = io::read_file(dir.file("local.record"));
  size_t at = text.find("\"complete\":true");
  ASSERT_NE(at, std::string::npos) << text.substr(0, 200);
  text.replace(at, 15, "\"complete\":false");
  io::write_file_atomically(dir.file("died.record"), text);
  Watched died = fit_in_process(
      dir, fit_args("ps-async:2x3:threads", "died", with({"--replay", dir.file("died.record")})), "died.log");
  EXPECT_NE(died.code, 0) << died.output;
  EXPECT_NE(died.output.find("a worker or server died in the recorded run, so its order cannot be forced again"),
            std::string::npos)
      << died.output;
}

// PsCluster.BoundedStalenessKeepsEveryWorkerWithinSStepsOfTheSlowest and
// PsCluster.BackupWorkersLetARoundGoWithoutTheStraggler, in one process: worker 1 a straggler.
TEST(PsInProcess, BoundedStalenessAndBackupWorkersBehaveAsInALaunchedCluster) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> slow{"TANDEM_TEST_PS_SLOW_WORKER=1:60"};
  for (int bound : {1, 2}) {
    std::string report = dir.file(fmt::format("s{}.json", bound));
    Watched w = fit_in_process(dir,
                               fit_args(fmt::format("ps-ssp:2x3:{}:threads", bound), fmt::format("s{}", bound),
                                        {"--batch-size", "16", "--report", report}, 1),
                               fmt::format("ssp{}.log", bound), slow);
    ASSERT_EQ(w.code, 0) << w.output;
    EXPECT_NE(w.output.find(fmt::format("(bound {})", bound)), std::string::npos) << w.output;
    EXPECT_EQ(most_ahead(w.output), bound) << w.output;
    // The report's histogram, by the chief's clocks: no step started more than S ahead, some at S.
    nlohmann::json counts = nlohmann::json::parse(io::read_file(report))["steps_ahead_of_slowest"];
    int64_t most = 0;
    for (auto& [ahead, count] : counts.items()) most = std::max<int64_t>(most, std::stoll(ahead));
    EXPECT_EQ(most, bound) << counts.dump();
  }
  Watched unbounded =
      fit_in_process(dir, fit_args("ps-async:1x3:threads", "async", {"--batch-size", "16"}, 1), "async.log", slow);
  ASSERT_EQ(unbounded.code, 0) << unbounded.output;
  EXPECT_GT(most_ahead(unbounded.output), 2) << unbounded.output;

  Watched backup =
      fit_in_process(dir, fit_args("ps-sync:1x3:1:threads", "backup", {"--batch-size", "16"}), "backup.log", slow);
  ASSERT_EQ(backup.code, 0) << backup.output;
  expect_backup_worker_drops(backup.output, 2 * 38);
}

// `argv` in a process group of its own, stopped once the backup in `checkpoints` is past the first
// epoch (SIGINT to a launcher, which ends its tasks; SIGKILL to one process): true when it was.
bool interrupt_after_first_epoch(const TempDir& dir, const std::vector<std::string>& argv,
                                 const std::string& checkpoints, const std::string& log, int signal) {
  // The epochs long enough to stop between.
  pid_t pid = spawn_group(argv, dir, dir.file(log), {"TANDEM_TEST_PS_SLOW_WORKER=0:5"});
  std::string backup = dir.file(checkpoints + "/backup/backup.safetensors");
  bool past = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!past && std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(backup)) try {
        past = io::load_safetensors(backup).metadata["epoch"] == "1";
      } catch (const Error&) {  // being written
      }
    if (!past) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(signal == SIGINT ? pid : -pid, signal);
  auto stopped = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid && std::chrono::steady_clock::now() - stopped < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(-pid, SIGKILL);  // whatever is left of it
  waitpid(pid, &status, WNOHANG);
  return past && !std::filesystem::exists(dir.file(checkpoints + "/final.safetensors"));
}

// A run stopped after its first epoch resumes from its backup in the other kind of cluster, both
// ways, and ends with the uninterrupted run's bits.
TEST(PsInProcess, ABackupResumesAcrossThreadsAndProcessesToTheSameBits) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 2400, 60);
  std::vector<std::string> more{"--batch-size", "16", "--backup-every", "0"};
  Watched reference = fit_in_process(dir, fit_args("ps-sync:1x1:threads", "reference", more), "reference.log");
  ASSERT_EQ(reference.code, 0) << reference.output;

  std::vector<std::string> local{TANDEM_CLI, "fit"},
      launched{TANDEM_CLI, "launch", "--ps", "1", "--workers", "1", "--", TANDEM_CLI, "fit"};
  for (const std::string& a : fit_args("ps-sync:1x1:threads", "a", more)) local.push_back(a);
  ASSERT_TRUE(interrupt_after_first_epoch(dir, local, "a", "a.log", SIGKILL)) << io::read_file(dir.file("a.log"));
  Watched resumed = launch_cluster(dir, 1, 1, fit_args("ps-sync", "a", more), "a-resumed.log");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  expect_same_state(dir.file("reference/final.safetensors"), dir.file("a/final.safetensors"), 0,
                    "in process, resumed launched");

  for (const std::string& a : fit_args("ps-sync", "b", more)) launched.push_back(a);
  ASSERT_TRUE(interrupt_after_first_epoch(dir, launched, "b", "b.log", SIGINT)) << io::read_file(dir.file("b.log"));
  Watched back = fit_in_process(dir, fit_args("ps-sync:1x1:threads", "b", more), "b-resumed.log");
  ASSERT_EQ(back.code, 0) << back.output;
  expect_same_state(dir.file("reference/final.safetensors"), dir.file("b/final.safetensors"), 0,
                    "launched, resumed in process");
}

// What needs tasks of their own is refused by name, before training.
TEST(PsInProcess, WhatOnlyProcessesCanDoIsRefusedByName) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 60, 10);
  auto refused = [&](std::vector<std::string> args, const std::string& message) {
    args.insert(args.begin(), "fit");
    args.insert(args.end(), {"--epochs", "1", "--verbose", "0"});
    Outcome r = run(args, dir);
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  };
  refused({"--strategy", "ps-sync:1x2:threads", "--auth", "keys"}, "an in-process cluster has no network to secure");
  refused({"--strategy", "ps-sync:1x2:threads", "--min-workers", "2"},
          "--min-workers 2 is for a cluster of processes, whose workers may die");
  io::write_file_atomically(dir.file("cluster.json"), R"({"cluster": {"chief": ["127.0.0.1:2222"]}})");
  refused({"--strategy", "ps-async:1x2:threads", "--cluster", "cluster.json"},
          "an in-process cluster makes its own tasks; a cluster spec (--cluster cluster.json) is for processes");
  refused({"--strategy", "ps-async:threads"},
          "an in-process cluster names its servers and workers: ps-async:1x3:threads");
  refused({"--strategy", "ps-sync:1x0:threads"}, "an in-process cluster names its servers and workers");
  setenv("TF_CONFIG", R"({"cluster": {"chief": ["127.0.0.1:2222"]}})", 1);  // as `tandem launch` sets it
  refused({"--strategy", "ps-async:1x2:threads"}, "an in-process cluster where TF_CONFIG names a task");
  unsetenv("TF_CONFIG");
}

// A task that fails (here every worker, on a malformed test hook) ends the chief's fit with its
// message, as a task's process would, instead of leaving it waiting.
TEST(PsInProcess, ATaskThatFailsEndsTheFitWithItsMessage) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 60, 10);
  Watched w = fit_in_process(dir, fit_args("ps-async:1x2:threads", "failed", {}, 1), "failed.log",
                             {"TANDEM_TEST_PS_SLOW_WORKER=bad"});
  EXPECT_EQ(w.code, 1) << w.output;
  EXPECT_FALSE(w.killed) << w.output;
  EXPECT_TRUE(std::regex_search(w.output, std::regex("error: worker:[01] \\(in process\\) reported: "
                                                     "TANDEM_TEST_PS_SLOW_WORKER: expected INDEX:MILLISECONDS")))
      << w.output;
}

}  // namespace
}  // namespace tandem::testing
