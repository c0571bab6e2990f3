// ParameterServerStrategy when tasks die and come back, under `tandem launch --ps P --workers W`
// (loopback ports chosen free at run time, a watchdog on every launch, failures injected from
// outside with SIGKILL): a worker's steps handed to the others and the worker started again, one
// started by hand or added to the running job, a server restored, a synchronous round closed
// without its dead worker, every worker gone and the job ended after the timeout; and an
// asynchronous run replayed from its record, bit for bit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli/cli_util.h"
#include "distribute/ps_cluster_util.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

// --record writes which worker took each step and each server's order of pulls and pushes; --replay
// forces it: an asynchronous run of 3 workers on 2 servers (a variable split over both) and its
// replay end with the same weights, bit for bit. A replay on another cluster shape, with other
// flags or from other weights is refused, naming both sides.
TEST(PsCluster, AReplayedAsynchronousRunEndsWithTheRecordedWeightsBitForBit) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  auto fit = [&](const std::vector<std::string>& more) {
    std::vector<std::string> args{
        "--model",   "mlp", "--strategy", "ps-async", "--epochs",   "2",   "--batch-size", "16",
        "--threads", "1",   "--verbose",  "0",        "--shard-mb", "0.1", "--data-dir",   dir.file("data")};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  std::string record = dir.file("run.record");
  Watched recorded = launch_cluster(dir, 2, 3, fit({"--record", record, "--checkpoint-dir", "a"}), "a.log");
  ASSERT_EQ(recorded.code, 0) << recorded.output;
  ASSERT_NE(io::read_file(record).find("\"tandem_ps_record\":1"), std::string::npos);
  Watched replayed = launch_cluster(dir, 2, 3, fit({"--replay", record, "--checkpoint-dir", "b"}), "b.log");
  ASSERT_EQ(replayed.code, 0) << replayed.output;
  expect_same_state(dir.file("a/final.safetensors"), dir.file("b/final.safetensors"), 0, "replay");

  Watched fewer = launch_cluster(dir, 2, 2, fit({"--replay", record}), "fewer.log", 60);
  EXPECT_NE(fewer.code, 0);
  EXPECT_NE(fewer.output.find("was recorded with 3 worker(s) and 2 server(s); this cluster has 2 worker(s) and 2 "
                              "server(s)"),
            std::string::npos)
      << fewer.output;
  Watched prefetch = launch_cluster(dir, 2, 3, fit({"--replay", record, "--prefetch"}), "prefetch.log", 60);
  EXPECT_NE(prefetch.code, 0);
  EXPECT_NE(prefetch.output.find("was recorded without --prefetch; this run is with it"), std::string::npos)
      << prefetch.output;
  Watched seed = launch_cluster(dir, 2, 3, fit({"--replay", record, "--seed", "7"}), "seed.log", 60);
  EXPECT_NE(seed.code, 0);
  EXPECT_NE(seed.output.find("the recorded run began from other weights"), std::string::npos) << seed.output;
}

// TANDEM_TEST_FAULT=kill|stop:RANK:training: server ps:0 (control rank 1) of a
// synchronous job dies or stops as it starts serving; the chief names it within the timeout and
// every task ends. (An asynchronous job restores it: below.)
TEST(PsCluster, AKilledOrStoppedServerIsNamedAndTheJobEnds) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  for (const char* fault : {"kill", "stop"}) {
    Watched w =
        launch_cluster(dir, 1, 2,
                       {"--model", "mlp", "--strategy", "ps-sync", "--epochs", "50", "--batch-size", "8", "--threads",
                        "1", "--timeout", "2", "--data-dir", dir.file("data")},
                       std::string(fault) + ".log", 60, {fmt::format("TANDEM_TEST_FAULT={}:1:training", fault)});
    // Named by the control connections (died, stopped answering) or by the wait on its answer.
    EXPECT_NE(w.code, 0) << fault << "\n" << w.output;
    EXPECT_FALSE(w.killed) << fault << ": the watchdog had to end it\n" << w.output;
    EXPECT_LT(w.seconds, 30.0) << fault;
    EXPECT_TRUE(std::regex_search(
        w.output, std::regex("ps:0 \\(127\\.0\\.0\\.1:[0-9]+\\) (died|stopped answering|did not answer within 2 s)")))
        << fault << "\n"
        << w.output;
    std::string left;
    run_command_output("pgrep -f '" + unquoted_pattern(dir.path()) + "' || true", &left);
    EXPECT_EQ(left, "") << fault << ": tasks left running";
  }
}

// The asynchronous job on real MNIST the fault tests kill a task of (1 server, 3 workers, mlp5,
// batch 50), started and seen to reach epoch 2; null (the test skipped) without the data.
std::unique_ptr<Background> real_mnist_job(const TempDir& dir, const std::string& epochs) {
  std::string data = std::string(TANDEM_SOURCE_DIR) + "/data";
  if (!std::filesystem::exists(data + "/mnist/train-images-idx3-ubyte")) return nullptr;
  auto job = std::make_unique<Background>(
      dir,
      std::vector<std::string>{
          TANDEM_CLI, "launch",     "--ps", "1",          "--workers", "3",         "--",   TANDEM_CLI,
          "fit",      "--model",    "mlp5", "--strategy", "ps-async",  "--epochs",  epochs, "--batch-size",
          "50",       "--lr-decay", "0.3",  "--data-dir", data,        "--verbose", "2"},
      "job.log");
  EXPECT_TRUE(job->wait_for("Epoch 2/", 120)) << job->said();
  return job;
}

void expect_test_accuracy_at_least(const std::string& out, double percent) {
  std::smatch said;
  ASSERT_TRUE(std::regex_search(out, said, std::regex("test accuracy: ([0-9.]+)%"))) << out;
  EXPECT_GE(std::stod(said[1].str()), percent) << out;
}

// Asynchronous, 1 server and 3 workers on real MNIST: worker 1 SIGKILLed as epoch 2 begins. The
// chief hands its steps to the others, the launcher starts it again, it rejoins and trains; the job
// ends 0, every step of the epoch trained (the chief's count), at least 97% test accuracy.
TEST(PsCluster, AKilledWorkerIsStartedAgainRejoinsAndEveryStepIsTrained) {
  TempDir dir;
  auto job = real_mnist_job(dir, "3");
  if (!job) GTEST_SKIP() << "skipped: real MNIST is not in ./data (bash scripts/setup fetches it)";
  pid_t worker = task_pid(job->pid(), "worker", 1);
  ASSERT_GT(worker, 0) << "worker:1's process not found";
  kill(worker, SIGKILL);
  int code = job->wait(240);
  std::string out = job->said();
  ASSERT_EQ(code, 0) << out;
  expect_no_sanitizer_report(out);
  EXPECT_TRUE(std::regex_search(out, std::regex("chief: worker:1 \\([^)]*\\) died during training"))) << out;
  EXPECT_NE(out.find("launch: starting task worker:1 again (restart 1 of 3)"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("worker:1 \\([^)]*\\) joined the running job"))) << out;
  EXPECT_NE(out.find("chief: this epoch's 1200 steps all trained"), std::string::npos) << out;
  std::smatch said;
  ASSERT_TRUE(std::regex_search(out, said, std::regex("worker:1 \\([^)]*\\): ([0-9]+) steps"))) << out;
  EXPECT_GT(std::stoll(said[1].str()), 0) << "the restarted worker got no step\n" << out;
  expect_test_accuracy_at_least(out, 97.0);
}

// Asynchronous, 1 server and 3 workers on real MNIST: the server SIGKILLed during training. The
// chief calls every step back, the launcher starts the server again, the chief restores it from its
// copy of the last epoch's end and training goes on without restarting the others: exit 0, the
// loss named in the log, at least 97% test accuracy.
TEST(PsCluster, AKilledServerIsRestoredAndTrainingGoesOn) {
  TempDir dir;
  auto job = real_mnist_job(dir, "4");
  if (!job) GTEST_SKIP() << "skipped: real MNIST is not in ./data (bash scripts/setup fetches it)";
  pid_t server = task_pid(job->pid(), "ps", 0);
  ASSERT_GT(server, 0) << "ps:0's process not found";
  kill(server, SIGKILL);
  int code = job->wait(240);
  std::string out = job->said();
  ASSERT_EQ(code, 0) << out;
  expect_no_sanitizer_report(out);
  // As epoch 2 begins the chief may still be reading the servers for its copy of epoch 1's end.
  EXPECT_TRUE(std::regex_search(out, std::regex("chief: ps:0 \\([^)]*\\) died during (training|serving a read)")))
      << out;
  EXPECT_NE(out.find("launch: starting task ps:0 again (restart 1 of 3)"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex("chief: ps:0 \\([^)]*\\) restored [0-9.]+ s after its death was seen, from the chief's copy of "
                      "epoch [0-9]+'s end; lost on its shards: the updates of the [0-9]+ steps trained since")))
      << out;
  // The workers went on as they were: none was started again.
  EXPECT_EQ(out.find("starting task worker"), std::string::npos) << out;
  expect_test_accuracy_at_least(out, 97.0);
}

// ps:0 (control rank 1) killed as it answers the chief's read of its state (its phase "serving a
// read": the first read is at the first epoch's end, for the chief's copy): the chief names it,
// the launcher starts it again, the chief restores it and reads again, and training goes on to
// the end. The fault fires once (TANDEM_TEST_FAULT_ONCE): the restored server is not killed again.
TEST(PsCluster, AServerKilledWhileTheChiefReadsItIsRestoredAndReadAgain) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::string once = dir.file("fired");
  Watched w =
      launch_cluster(dir, 1, 2,
                     {"--model", "mlp", "--strategy", "ps-async", "--epochs", "6", "--batch-size", "16", "--threads",
                      "1", "--verbose", "2", "--data-dir", dir.file("data")},
                     "read.log", 180, {"TANDEM_TEST_FAULT=kill:1:serving-a-read", "TANDEM_TEST_FAULT_ONCE=" + once});
  ASSERT_EQ(w.code, 0) << w.output;
  EXPECT_TRUE(std::filesystem::exists(once)) << "the fault never fired\n" << w.output;
  expect_no_sanitizer_report(w.output);
  EXPECT_TRUE(std::regex_search(w.output, std::regex("chief: ps:0 \\([^)]*\\) died during serving a read")))
      << w.output;
  EXPECT_NE(w.output.find("launch: starting task ps:0 again (restart 1 of 3)"), std::string::npos) << w.output;
  EXPECT_TRUE(std::regex_search(w.output, std::regex("chief: ps:0 \\([^)]*\\) restored"))) << w.output;
  expect_test_accuracy_at_least(w.output, 90.0);
}

// The asynchronous job these tests add a worker to (its fit command, which a task started by hand
// runs too): mlp on small data, 150 epochs, 2 workers; and its launch on 1 server.
std::vector<std::string> small_async_fit(const TempDir& dir) {
  make_mnist(dir.file("data/mnist"), 600, 60);
  return {TANDEM_CLI,     "fit", "--model",   "mlp", "--strategy", "ps-async", "--epochs",   "150",
          "--batch-size", "8",   "--threads", "1",   "--verbose",  "2",        "--data-dir", dir.file("data")};
}
std::vector<std::string> launched(const std::vector<std::string>& fit) {
  std::vector<std::string> launch{TANDEM_CLI, "launch", "--ps", "1", "--workers", "2", "--"};
  launch.insert(launch.end(), fit.begin(), fit.end());
  return launch;
}

// A second copy of a running worker (started by hand with worker:0's TF_CONFIG) is refused by the
// chief and ends, naming why; the job goes on as it was and finishes.
TEST(PsCluster, ASecondCopyOfARunningWorkerIsRefused) {
  TempDir dir;
  std::vector<std::string> fit = small_async_fit(dir);
  Background job(dir, launched(fit), "job.log");
  ASSERT_TRUE(job.wait_for("Epoch 2/", 120)) << job.said();
  pid_t worker = task_pid(job.pid(), "worker", 0);
  ASSERT_GT(worker, 0) << "worker:0's process not found";
  Background copy(dir, fit, "copy.log", tf_config_of(worker));
  int copy_code = copy.wait(60), code = job.wait(240);
  std::string out = job.said(), theirs = copy.said();
  EXPECT_NE(copy_code, 0) << theirs;
  EXPECT_TRUE(
      std::regex_search(theirs, std::regex("refused worker:0 \\([^)]*\\): worker:0 \\([^)]*\\) is already running")))
      << theirs;
  ASSERT_EQ(code, 0) << out;
  expect_no_sanitizer_report(out);
  expect_no_sanitizer_report(theirs);
  EXPECT_EQ(out.find("died"), std::string::npos) << out;
  EXPECT_EQ(out.find("starting task worker"), std::string::npos) << out;
  expect_test_accuracy_at_least(out, 90.0);
}

// Elastic: a worker the job did not start with (its TF_CONFIG lists one more worker, itself)
// joins the running asynchronous job of 2 workers, trains steps, and ends with it.
TEST(PsCluster, AWorkerAddedToARunningJobJoinsAndTrains) {
  TempDir dir;
  std::vector<std::string> fit = small_async_fit(dir);
  Background job(dir, launched(fit), "job.log");
  ASSERT_TRUE(job.wait_for("Epoch 2/", 120)) << job.said();
  pid_t chief = task_pid(job.pid(), "chief", 0);
  ASSERT_GT(chief, 0) << "the chief's process not found";
  nlohmann::json config = nlohmann::json::parse(tf_config_of(chief));
  config["cluster"]["worker"].push_back("127.0.0.1:1");  // a worker's address is never bound
  config["task"] = {{"type", "worker"}, {"index", 2}};
  Background added(dir, fit, "added.log", config.dump());
  int code = job.wait(240), added_code = added.wait(60);
  std::string out = job.said(), mine = added.said();
  ASSERT_EQ(code, 0) << out;
  expect_no_sanitizer_report(out);
  expect_no_sanitizer_report(mine);
  EXPECT_NE(out.find("chief: worker:2 (joined) joined the running job"), std::string::npos) << out;
  EXPECT_EQ(added_code, 0) << mine;
  std::smatch said;
  ASSERT_TRUE(std::regex_search(mine, said, std::regex("worker:2 \\([^)]*\\): ([0-9]+) steps"))) << mine;
  EXPECT_GT(std::stoll(said[1].str()), 0) << "the added worker got no step\n" << mine;
}

// Synchronous, 2 servers and 3 workers: worker 1 SIGKILLed during training is dropped from its
// round (the servers apply the others' gradients) and the rounds go on with 2 workers until the
// launcher's restart rejoins it; with --min-workers 3 the job ends instead, naming the rule.
TEST(PsCluster, ASynchronousJobDropsADeadWorkerFromItsRoundOrEndsBelowMinWorkers) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  auto job = [&](const std::vector<std::string>& more, const std::string& log) {
    std::vector<std::string> argv{TANDEM_CLI,  "launch",     "--ps",         "2",          "--workers",
                                  "3",         "--",         TANDEM_CLI,     "fit",        "--model",
                                  "mlp",       "--strategy", "ps-sync",      "--epochs",   "60",
                                  "--threads", "1",          "--batch-size", "8",          "--verbose",
                                  "2",         "--shard-mb", "0.1",          "--data-dir", dir.file("data")};
    argv.insert(argv.end(), more.begin(), more.end());
    auto started = std::make_unique<Background>(dir, argv, log);
    EXPECT_TRUE(started->wait_for("Epoch 2/", 120)) << started->said();
    pid_t worker = task_pid(started->pid(), "worker", 1);
    EXPECT_GT(worker, 0) << "worker:1's process not found";
    if (worker > 0) kill(worker, SIGKILL);
    return started;
  };
  auto dropped = job({}, "dropped.log");
  ASSERT_EQ(dropped->wait(240), 0) << dropped->said();
  std::string out = dropped->said();
  expect_no_sanitizer_report(out);
  EXPECT_NE(out.find("the rounds go on with 2 worker(s)"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("worker:1 \\([^)]*\\) joined the running job"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("this epoch's batches: [0-9]+ trained, [01] not"))) << out;

  auto ends = job({"--min-workers", "3"}, "ends.log");
  EXPECT_NE(ends->wait(120), 0);
  EXPECT_NE(ends->said().find("2 worker(s) left, fewer than --min-workers 3: the job ends"), std::string::npos)
      << ends->said();
}

// `tandem launch` of a synchronous job of 1 server and 2 workers (mlp, batch 8, --timeout 2).
std::vector<std::string> synchronous_job(const TempDir& dir, const std::string& epochs) {
  std::vector<std::string> fit{
      "--model",      "mlp", "--strategy", "ps-sync", "--epochs",  epochs, "--threads",  "1",
      "--batch-size", "8",   "--verbose",  "2",       "--timeout", "2",    "--data-dir", dir.file("data")};
  std::vector<std::string> argv{TANDEM_CLI, "launch", "--ps", "1", "--workers", "2", "--", TANDEM_CLI, "fit"};
  argv.insert(argv.end(), fit.begin(), fit.end());
  return argv;
}

// Synchronous, 1 server and 2 workers: worker 1 SIGSTOPped past --timeout is dropped from the
// rounds, then SIGCONTed, three times over. It goes on where it was stopped (with a step of a round
// the chief has closed in hand, it pulls the newest weights and pushes for that round) until it sees
// that the job went on without it and ends; the launcher starts it again and it rejoins. The job
// ends 0. Two bugs it found: a worker stopped just after its step went out was blamed as slow ("did
// not answer within 2 s") before the control plane named it stopped (the chief now waits twice the
// timeout where workers may die); and its late push started a round nobody completed, so the next
// round's push ended the job (found by the chaos harness; this test caught it in 1 of 6 runs with one
// stop, so PsUpdates.SynchronousDropsAPushForARoundAlreadyClosed and
// ParameterServer.ClosesNumberedRoundsAndDropsAPushForAClosedOne check the drop deterministically).
TEST(PsCluster, ASynchronousJobGoesOnWhenAWorkerStoppedPastTheTimeoutIsContinued) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> argv = synchronous_job(dir, "400");
  Background job(dir, argv, "job.log");
  ASSERT_TRUE(job.wait_for("Epoch 2/", 120)) << job.said();
  auto seen = [&](const std::string& text, size_t times) {  // within 30 s
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      std::string out = job.said();
      size_t count = 0;
      for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++count;
      if (count >= times) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  for (size_t stop = 1; stop <= 3; ++stop) {
    pid_t worker = task_pid(job.pid(), "worker", 1);
    ASSERT_GT(worker, 0) << "worker:1's process not found";
    kill(worker, SIGSTOP);
    bool named = seen("the rounds go on with 1 worker", stop);  // the chief's line, not the worker's
    kill(worker, SIGCONT);
    ASSERT_TRUE(named) << job.said();
    ASSERT_TRUE(seen("joined the running job", stop)) << job.said();
  }
  int code = job.wait(600);  // about 25 s here; 6.4 minutes under ThreadSanitizer
  std::string out = job.said();
  ASSERT_EQ(code, 0) << out;
  expect_no_sanitizer_report(out);
  EXPECT_TRUE(std::regex_search(
      out, std::regex("worker:1 \\([^)]*\\) stopped answering during training: [^\n]*the rounds go on with 1 worker")))
      << out;
  EXPECT_EQ(out.find("refused"), std::string::npos) << out;
  // The stopped worker, once it goes on, names itself (its own "was stopped for", or the chief's
  // word that the job goes on without it), never the chief as dead.
  EXPECT_FALSE(std::regex_search(out, std::regex("error: chief:0 \\([^)]*\\) died"))) << out;
}

// Synchronous, 1 server and 2 workers: worker 1 (control rank 3) SIGSTOPped at start-up past
// --timeout, as it greets the chief or, greeted, as it connects its control connection. The chief
// starts the job with worker 0, naming worker 1; the others are never kept waiting on it (before,
// the chief's wait for the stopped worker's greeting kept the control port from answering them:
// "cannot reach chief:0", and the job ended, as the chaos harness found). Continued, worker 1
// joins the running job, and the job ends 0.
TEST(PsCluster, AWorkerStoppedAtStartUpIsNamedAndJoinsWhenContinued) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  for (const char* phase : {"greeting", "connecting"}) {
    std::vector<std::string> argv = synchronous_job(dir, "60");
    setenv("TANDEM_TEST_FAULT", fmt::format("stop:3:{}", phase).c_str(), 1);
    Background job(dir, argv, std::string(phase) + ".log");
    unsetenv("TANDEM_TEST_FAULT");
    ASSERT_TRUE(job.wait_for("did not join during start-up", 60)) << phase << "\n" << job.said();
    ASSERT_TRUE(job.wait_for("Epoch 2/", 60)) << phase << "\n" << job.said();
    pid_t worker = task_pid(job.pid(), "worker", 1);
    ASSERT_GT(worker, 0) << "worker:1's process not found";
    kill(worker, SIGCONT);
    int code = job.wait(240);
    std::string out = job.said();
    ASSERT_EQ(code, 0) << phase << "\n" << out;
    expect_no_sanitizer_report(out);
    EXPECT_TRUE(std::regex_search(out, std::regex("chief: worker:1 \\([^)]*\\) did not join during start-up: no "
                                                  "control connection within 2 s[^\n]*the rounds go on with 1 worker")))
        << phase << "\n"
        << out;
    EXPECT_TRUE(std::regex_search(out, std::regex("worker:1 \\([^)]*\\) joined the running job"))) << phase << "\n"
                                                                                                   << out;
    EXPECT_EQ(out.find("cannot reach"), std::string::npos) << phase << "\n" << out;
    EXPECT_EQ(out.find("starting task worker:1 again"), std::string::npos) << phase << "\n" << out;
    std::smatch said;
    ASSERT_TRUE(std::regex_search(out, said, std::regex("worker:1 \\([^)]*\\): ([0-9]+) steps"))) << out;
    EXPECT_GT(std::stoll(said[1].str()), 0) << phase << ": the continued worker got no step\n" << out;
  }
}

// With --restarts 0 the launcher leaves a dead worker dead; the same task started by hand (its
// TF_CONFIG) joins the running job, trains steps, and ends with it.
// Asynchronous, no restarts, both workers SIGKILLed once epoch 2 begins: the chief waits for one
// to come back at most --timeout, then ends the job naming why, every task ending.
TEST(PsCluster, EveryWorkerGoneEndsTheJobAfterTheTimeout) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> launch{TANDEM_CLI,   "launch",     "--ps",
                                  "1",          "--workers",  "2",
                                  "--restarts", "0",          "--",
                                  TANDEM_CLI,   "fit",        "--model",
                                  "mlp",        "--strategy", "ps-async",
                                  "--epochs",   "150",        "--batch-size",
                                  "8",          "--threads",  "1",
                                  "--verbose",  "2",          "--timeout",
                                  "3",          "--data-dir", dir.file("data")};
  Background job(dir, launch, "job.log");
  ASSERT_TRUE(job.wait_for("Epoch 2/", 120)) << job.said();
  for (int w : {0, 1}) {
    pid_t worker = task_pid(job.pid(), "worker", w);
    ASSERT_GT(worker, 0) << "worker:" << w << "'s process not found";
    kill(worker, SIGKILL);
  }
  int code = job.wait(60);
  std::string out = job.said();
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(code, -1) << "the job did not end within 60 s of losing every worker\n" << out;
  EXPECT_NE(out.find("no worker is left: every one died and none came back within 3 s"), std::string::npos) << out;
}

TEST(PsCluster, AWorkerStartedAgainByHandJoinsTheRunningJob) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> fit{
      TANDEM_CLI,     "fit", "--model",   "mlp", "--strategy", "ps-async", "--epochs",   "150",
      "--batch-size", "8",   "--threads", "1",   "--verbose",  "2",        "--data-dir", dir.file("data")};
  std::vector<std::string> launch{TANDEM_CLI, "launch", "--ps", "1", "--workers", "2", "--restarts", "0", "--"};
  launch.insert(launch.end(), fit.begin(), fit.end());
  Background job(dir, launch, "job.log");
  ASSERT_TRUE(job.wait_for("Epoch 2/", 120)) << job.said();
  pid_t worker = task_pid(job.pid(), "worker", 1);
  ASSERT_GT(worker, 0) << "worker:1's process not found";
  std::string config = tf_config_of(worker);
  kill(worker, SIGKILL);
  ASSERT_TRUE(job.wait_for("died during training", 60)) << job.said();
  Background by_hand(dir, fit, "hand.log", config);
  int code = job.wait(240), hand_code = by_hand.wait(60);
  std::string out = job.said(), hand = by_hand.said();
  ASSERT_EQ(code, 0) << out;
  expect_no_sanitizer_report(out);
  expect_no_sanitizer_report(hand);
  EXPECT_EQ(out.find("starting task worker:1 again"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("worker:1 \\([^)]*\\) joined the running job"))) << out;
  EXPECT_EQ(hand_code, 0) << hand;
  std::smatch said;
  ASSERT_TRUE(std::regex_search(hand, said, std::regex("worker:1 \\([^)]*\\): ([0-9]+) steps"))) << hand;
  EXPECT_GT(std::stoll(said[1].str()), 0) << "the worker started by hand got no step\n" << hand;
}

}  // namespace
}  // namespace tandem::testing
