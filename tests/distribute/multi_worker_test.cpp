// MultiWorkerMirroredStrategy across processes started by `tandem launch` on loopback: the weights
// after training equal one process's on the same global batches (bitwise in deterministic mode),
// on 2 and 3 workers and with 2 replicas per worker; `tandem fit --strategy multiworker` under the
// launcher, alone (it says how to launch), with a stuck worker (named within the timeout), and
// killed mid-epoch then resumed from its backup on 2 and on 3 workers to the uninterrupted bits.
// Every run is under a watchdog that kills its process group. Skipped without MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "distribute/launch_util.h"
#include "distribute/netns_hosts.h"

namespace tandem::testing {
namespace {

TEST(MultiWorker, TrainsAsOneProcessOnTheSameGlobalBatches) {
  SKIP_WITHOUT_MPI();
  struct Case {
    int workers, local;
    const char* mode;
  };
  for (Case c :
       {Case{2, 1, "fast"}, Case{3, 1, "fast"}, Case{2, 2, "fast"}, Case{2, 1, "bucketed"}, Case{3, 1, "bucketed"},
        Case{2, 2, "bucketed"}, Case{2, 1, "deterministic"}, Case{3, 1, "deterministic"}, Case{2, 2, "deterministic"},
        Case{2, 2, "frozen"}, Case{2, 1, "weighted"}, Case{3, 1, "weighted"}}) {
    TempDir dir;
    Watched w = launch_check(dir, c.workers, "train", 20000, {std::to_string(c.local), c.mode});
    ASSERT_EQ(w.code, 0) << c.workers << " workers x " << c.local << " replicas, " << c.mode << "\n" << w.output;
    expect_every_rank(w, c.workers, "weights match");
  }
}

// ZeRO stage 1 (multiworker:N:zero) over 2 and 3 workers: the plain strategy's weights and whole
// checkpoint state (bitwise in deterministic mode), each worker keeping 1/N of the optimizer's slots.
TEST(MultiWorker, ZeroOneEqualsThePlainStrategyKeepingOneNthOfTheSlots) {
  SKIP_WITHOUT_MPI();
  for (int workers : {2, 3})
    for (const char* mode : {"zero", "zero-deterministic"}) {
      TempDir dir;
      Watched w = launch_check(dir, workers, "train", 20000, {"1", mode});
      ASSERT_EQ(w.code, 0) << workers << " workers, " << mode << "\n" << w.output;
      expect_every_rank(w, workers, "zero matches");
    }
}

// distribute_dataset, run and reduce in a custom loop: each worker's replicas take their rows of
// every global batch, and reduce sums over every worker's replicas.
TEST(MultiWorker, ACustomLoopMatchesOneProcess) {
  SKIP_WITHOUT_MPI();
  for (auto [workers, local] : {std::pair{2, 1}, std::pair{3, 1}, std::pair{2, 2}}) {
    TempDir dir;
    Watched w = launch_check(dir, workers, "custom", 20000, {std::to_string(local)});
    ASSERT_EQ(w.code, 0) << w.output;
    expect_every_rank(w, workers, "custom loop matches");
  }
}

TEST(MultiWorker, WorkersWithDifferentDataAreNamed) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  // 75 rows against 73: the same 4 batches of 24, but the last has 3 rows on one, 1 on the other.
  Watched w = launch_check(dir, 2, "uneven", 20000, {"75"});
  EXPECT_NE(w.code, 0);
  EXPECT_FALSE(w.killed) << w.output;
  EXPECT_NE(w.output.find("at batch 4 of epoch 1 worker 0 has one of 1 rows and worker 1 has one of 3 rows"),
            std::string::npos)
      << w.output;
  // 70 rows: 3 batches, not 4; the workers compare their settings before training.
  w = launch_check(dir, 2, "uneven", 20000, {"70"});
  EXPECT_NE(w.code, 0);
  EXPECT_NE(w.output.find("workers disagree on the data and settings: worker 0 (host "), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("steps per epoch 4"), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("steps per epoch 3"), std::string::npos) << w.output;
}

// Without a launcher and without TF_CONFIG the process is the one worker, as TensorFlow runs
// MultiWorkerMirroredStrategy without a cluster, and says so; with TF_CONFIG naming a cluster but
// no launcher it cannot reach the others, and says how to launch.
TEST(MultiWorker, StartedWithoutALauncherIsOneWorkerOrSaysHowToLaunch) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 300, 60);
  Watched alone =
      run_watched({TANDEM_CLI, "fit", "--strategy", "multiworker", "--data-dir", dir.file("data"), "--epochs", "1",
                   "--batch-size", "50", "--threads", "1", "--report", dir.file("report.json")},
                  dir, 120);
  ASSERT_EQ(alone.code, 0) << alone.output;
  EXPECT_NE(alone.output.find("no launcher and no TF_CONFIG, so this process is the only worker"), std::string::npos)
      << alone.output;
  auto report = nlohmann::json::parse(io::read_file(dir.file("report.json")));
  EXPECT_EQ(report["strategy"], "multiworker:1") << report.dump();
  // The same fit under the default strategy: one worker of one replica trains to its weights.
  Watched one = run_watched({TANDEM_CLI, "fit", "--data-dir", dir.file("data"), "--epochs", "1", "--batch-size", "50",
                             "--threads", "1", "--report", dir.file("default.json")},
                            dir, 120);
  ASSERT_EQ(one.code, 0) << one.output;
  auto plain = nlohmann::json::parse(io::read_file(dir.file("default.json")));
  EXPECT_EQ(report["final_training_loss"], plain["final_training_loss"]) << report.dump() << plain.dump();
  EXPECT_EQ(report["test_accuracy"], plain["test_accuracy"]);
  Watched w = run_watched({"/usr/bin/env",
                           "TF_CONFIG={\"cluster\": {\"worker\": [\"localhost:2222\"]}, "
                           "\"task\": {\"type\": \"worker\", \"index\": 0}}",
                           TANDEM_CLI, "fit", "--strategy", "multiworker", "--epochs", "1"},
                          dir, 60);
  EXPECT_NE(w.code, 0);
  if (distribute::mpi_built()) {
    EXPECT_NE(w.output.find("TF_CONFIG names a cluster, but this process was not started by a launcher"),
              std::string::npos)
        << w.output;
    EXPECT_NE(w.output.find("tandem launch -np 2 -- <this command>"), std::string::npos) << w.output;
  } else {
    EXPECT_NE(w.output.find("built without MPI"), std::string::npos) << w.output;
  }
}

// `tandem fit` on 2 and 3 workers: the chief's final weights are one process's, bit for bit.
TEST(MultiWorker, FitUnderTheLauncherEndsWithOneProcesssWeights) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> one{TANDEM_CLI};
  for (const std::string& a : fit_args(dir, "mirrored:1:deterministic", dir.file("one"))) one.push_back(a);
  Watched reference = run_watched(one, dir, 120, "one.log");
  ASSERT_EQ(reference.code, 0) << reference.output;
  for (int workers : {2, 3}) {
    std::string ck = dir.file(fmt::format("w{}", workers));
    Watched w = run_watched(launched(workers, fit_args(dir, "multiworker:deterministic", ck)), dir, 120);
    ASSERT_EQ(w.code, 0) << w.output;
    EXPECT_NE(w.output.find("Test loss:"), std::string::npos) << w.output;  // the chief reports, once
    EXPECT_EQ(w.output.find("Test loss:"), w.output.rfind("Test loss:")) << w.output;
    expect_same_final_weights(dir.file("one/final.safetensors"), ck + "/final.safetensors",
                              fmt::format("{} workers", workers));
  }
}

// --fusion-mb, --compression and --timeline under the launcher: each worker writes its Chrome
// trace, which holds every phase (the all-reduces on the communication thread), and the chief
// says where the traces went and how much of the all-reduce was hidden.
TEST(MultiWorker, FitWritesATimelinePerWorker) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> args = fit_args(dir, "multiworker", dir.file("ck"));
  args.back() = "1";  // --verbose 1: the chief prints the summary
  for (const char* a : {"--fusion-mb", "0.01", "--compression", "bf16", "--timeline", "trace.json"}) args.push_back(a);
  Watched w = run_watched(launched(2, args), dir, 120);
  ASSERT_EQ(w.code, 0) << w.output;
  EXPECT_NE(w.output.find("Timeline: trace.rank0.json (open it in chrome://tracing"), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("hidden behind backward"), std::string::npos) << w.output;
  for (int rank : {0, 1}) {
    auto trace = nlohmann::json::parse(io::read_file(dir.file(fmt::format("trace.rank{}.json", rank))));
    std::map<std::string, int> phases;
    std::set<std::string> threads;
    for (const auto& e : trace["traceEvents"]) {
      EXPECT_EQ(e["pid"], rank);
      if (e["ph"] == "X") ++phases[e["name"]];
      if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
    }
    for (const char* phase : {"forward", "backward", "all_reduce", "wait", "update"})
      EXPECT_GE(phases[phase], 20) << "rank " << rank << " phase " << phase;  // 2 epochs of 10 steps
    EXPECT_TRUE(threads.count("communication") && threads.count(fmt::format("replica {}", rank))) << rank;
  }
}

TEST(MultiWorker, CompareLaunchesTheWorkers) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  Watched w = run_watched(
      {TANDEM_CLI, "compare", "--strategies", "default,multiworker:2", "--epochs", "1", "--data-dir", dir.file("data"),
       "--batch-size", "60", "--threads", "1", "--chart", "", "--report", dir.file("compare.json")},
      dir, 120);
  ASSERT_EQ(w.code, 0) << w.output;
  auto report = nlohmann::json::parse(io::read_file(dir.file("compare.json")));
  ASSERT_EQ(report["runs"].size(), 2u);
  EXPECT_EQ(report["runs"][1]["strategy"], "multiworker:2");
  EXPECT_EQ(report["runs"][1]["replicas"], 2);
  // The same data, model and seed: one process and two workers end at the same loss (to float
  // summation order).
  EXPECT_NEAR(report["runs"][1]["final_training_loss"].get<double>(),
              report["runs"][0]["final_training_loss"].get<double>(), 1e-5);
}

TEST(MultiWorker, AStuckWorkerIsNamedWithinTheTimeout) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  Watched w = run_watched(launched(3, fit_args(dir, "multiworker", dir.file("ck"), 2)), dir, 60, "stuck.log",
                          {"TANDEM_TEST_FAULT=hang:1:4"});
  EXPECT_NE(w.code, 0);
  EXPECT_FALSE(w.killed) << "the watchdog had to end it\n" << w.output;
  EXPECT_LT(w.seconds, 30.0);
  EXPECT_NE(w.output.find("rank 1 (host "), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("has not entered it"), std::string::npos) << w.output;
}

// Worker 1 killed (SIGKILL) mid-epoch: the others stop, naming it; the same command resumes the
// run from the chief's backup on 2 workers, and on 3, to the uninterrupted run's bits.
TEST(MultiWorker, KilledMidEpochResumesOnTwoOrThreeWorkersToTheSameBits) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  Watched reference =
      run_watched(launched(2, fit_args(dir, "multiworker:deterministic", dir.file("reference"))), dir, 120, "ref.log");
  ASSERT_EQ(reference.code, 0) << reference.output;
  for (int resume_on : {2, 3}) {
    std::string ck = dir.file(fmt::format("killed{}", resume_on));
    Watched killed = run_watched(launched(2, fit_args(dir, "multiworker:deterministic", ck)), dir, 120, "killed.log",
                                 {"TANDEM_TEST_FAULT=kill:1:14"});  // step 14: epoch 2 (10 steps each), after a backup
    EXPECT_NE(killed.code, 0);
    EXPECT_FALSE(killed.killed) << killed.output;
    EXPECT_TRUE(names_killed_rank(killed.output, 1)) << killed.output;
    ASSERT_TRUE(std::filesystem::exists(ck + "/backup/backup.safetensors")) << killed.output;
    ASSERT_FALSE(std::filesystem::exists(ck + "/final.safetensors"));
    auto meta = io::load_safetensors(ck + "/backup/backup.safetensors").metadata;
    EXPECT_EQ(meta["epoch"], "1");
    EXPECT_NE(meta["step"], "0");
    Watched resumed =
        run_watched(launched(resume_on, fit_args(dir, "multiworker:deterministic", ck)), dir, 120, "resumed.log");
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    expect_same_final_weights(dir.file("reference/final.safetensors"), ck + "/final.safetensors",
                              fmt::format("resumed on {} workers", resume_on));
  }
}

// Under the launcher the ranks' output is Open MPI's pseudo-terminal; the chief's progress follows
// the launcher's own output instead: written to a file, one line per epoch and no control codes.
TEST(MultiWorker, ProgressOfALaunchedJobIntoAFileHasNoTerminalCodes) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> args = fit_args(dir, "multiworker", dir.file("ck"));
  args.back() = "1";  // --verbose 1: the progress bar where there is a terminal
  Watched w = run_watched(launched(2, args), dir, 120);
  ASSERT_EQ(w.code, 0) << w.output;
  EXPECT_EQ(w.output.find('\r'), std::string::npos) << w.output;
  EXPECT_EQ(w.output.find("\033[K"), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("Epoch 2/2"), std::string::npos) << w.output;
}

// A backup of another run is refused naming the optimizer's settings in force, as flags (not the
// "not given" placeholders: an empty name, 0, -1).
TEST(MultiWorker, ABackupOfAnotherRunNamesTheOptimizerSettingsInForce) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::string ck = dir.file("ck");
  Watched killed = run_watched(launched(2, fit_args(dir, "multiworker", ck)), dir, 120, "killed.log",
                               {"TANDEM_TEST_FAULT=kill:1:5"});
  ASSERT_NE(killed.code, 0) << killed.output;
  ASSERT_TRUE(std::filesystem::exists(ck + "/backup/backup.safetensors")) << killed.output;
  std::vector<std::string> other = fit_args(dir, "multiworker", ck);
  other.insert(other.end(), {"--learning-rate", "0.5"});
  Watched refused = run_watched(launched(2, other), dir, 120, "refused.log");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.output.find("optimizer flags: \"--optimizer adam --learning-rate 0.001 --lr-decay 1\" in the "
                                "backup, \"--optimizer adam --learning-rate 0.5 --lr-decay 1\" now"),
            std::string::npos)
      << refused.output;
}

// Every phase of a job, with one of two workers killed (SIGKILL) or stopped (SIGSTOP) as it
// enters it (TANDEM_TEST_FAULT=kill|stop:RANK:PHASE): the job ends non-zero within the timeout
// and a few seconds, the output names the rank and the phase, and no process is left. The chief
// alone enters the phases that write files, so it is the one stopped there.
TEST(MultiWorker, ARankKilledOrStoppedInAnyPhaseEndsTheJobNamingTheRankAndThePhase) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  constexpr double kTimeout = 2;
  struct Case {
    const char* phase;  // as the hook takes it
    int rank;
    const char* named;  // the phase as the message names it
  };
  for (const char* kind : {"kill", "stop"}) {
    for (Case c : {Case{"start-up", 1, "start-up"}, Case{"start-up", 0, "start-up"}, Case{"connecting", 1, "start-up"},
                   Case{"agreement-checks", 1, "agreement checks"}, Case{"training", 1, "training"},
                   Case{"validation", 1, "validation"}, Case{"evaluation", 1, "evaluation"},
                   Case{"checkpoint-writing", 0, "checkpoint writing"}, Case{"backup-writing", 0, "backup writing"},
                   Case{"the-final-report", 0, "the final report"}, Case{"shutdown", 1, "shutdown"},
                   Case{"shutdown", 0, "shutdown"}}) {
      std::string what = fmt::format("{}:{}:{}", kind, c.rank, c.phase);
      std::vector<std::string> args = fit_args(dir, "multiworker", dir.file("ck-" + what), kTimeout);
      args.insert(args.end(), {"--validation-split", "0.1"});
      Watched w = run_watched(launched(2, args), dir, 60, "fault.log", {"TANDEM_TEST_FAULT=" + what});
      EXPECT_NE(w.code, 0) << what << "\n" << w.output;
      EXPECT_FALSE(w.killed) << what << ": the watchdog had to end it\n" << w.output;
      EXPECT_LT(w.seconds, kTimeout + 10) << what << "\n" << w.output;
      // Before MPI has started no rank knows the others: mpirun names a killed one, or (when it
      // reports first the rank it ended) the others name the ranks that may have failed to start.
      bool named = std::string(kind) == "kill" ? names_killed_rank(w.output, c.rank) : false;
      named = named || w.output.find(fmt::format("rank {} (host ", c.rank)) != std::string::npos ||
              w.output.find(fmt::format("rank {} has not come", c.rank)) != std::string::npos ||
              w.output.find(fmt::format("rank {} failed to start", c.rank)) != std::string::npos;
      EXPECT_TRUE(named) << what << "\n" << w.output;
      EXPECT_NE(w.output.find(fmt::format("during {}", c.named)), std::string::npos) << what << "\n" << w.output;
      std::vector<std::string> left = processes_mentioning(dir.path());
      EXPECT_TRUE(left.empty()) << what << ": left behind: " << (left.empty() ? "" : left[0]);
      for (const std::string& p : left) kill(std::stoi(p.substr(0, p.find(':'))), SIGKILL);
    }
  }
}

// Three hosts as network namespaces on a bridge (netns_hosts.h): training agrees bit for bit with
// one process, and a stuck worker is named with its host. Skipped, with the reason, where
// namespaces cannot be made.
TEST(MultiWorker, ThreeHostsAsNetworkNamespacesTrainAsOneProcess) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  Namespaces hosts(dir);
  if (!hosts.ok()) GTEST_SKIP() << "skipped: network namespaces are not available here: " << hosts.why();
  make_mnist(dir.file("data/mnist"), 600, 60);
  std::vector<std::string> one{TANDEM_CLI};
  for (const std::string& a : fit_args(dir, "mirrored:1:deterministic", dir.file("one"))) one.push_back(a);
  ASSERT_EQ(run_watched(one, dir, 120, "one.log").code, 0);
  // Without --insecure, ranks on several machines are refused on every rank, naming the machines.
  Watched refused = run_watched(hosts.launch(dir, fit_args(dir, "multiworker:3", dir.file("refused"))), dir, 60);
  EXPECT_NE(refused.code, 0);
  EXPECT_FALSE(refused.killed) << refused.output;
  std::string said = fmt::format(
      "error: MPI: the ranks are on 3 machines ({}, {}, {}): rank 0's control port would "
      "listen on every interface",
      hosts.host(1), hosts.host(2), hosts.host(3));
  EXPECT_NE(refused.output.find(said), std::string::npos) << refused.output;
  auto trusted = [&](std::vector<std::string> args) {
    args.push_back("--insecure");
    return args;
  };
  Watched w = run_watched(hosts.launch(dir, trusted(fit_args(dir, "multiworker:3:deterministic", dir.file("three")))),
                          dir, 180);
  ASSERT_EQ(w.code, 0) << w.output;
  expect_same_final_weights(dir.file("one/final.safetensors"), dir.file("three/final.safetensors"), "3 hosts");

  // The same cluster as a TF_CONFIG; then with a fourth worker whose address no host answers.
  Watched tf = run_watched(
      hosts.launch(dir, trusted(fit_args(dir, "multiworker:3:deterministic", dir.file("tf"))), hosts.workers()), dir,
      180);
  ASSERT_EQ(tf.code, 0) << tf.output;
  expect_same_final_weights(dir.file("one/final.safetensors"), dir.file("tf/final.safetensors"), "TF_CONFIG");
  std::vector<std::string> four = hosts.workers();
  four.push_back(four[0].substr(0, four[0].rfind('.')) + ".9:2222");
  Watched missing =
      run_watched(hosts.launch(dir, trusted(fit_args(dir, "multiworker", dir.file("four"))), four), dir, 60);
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.output.find(fmt::format("TF_CONFIG task worker:3 (\"{}\"): no process could be started", four[3])),
            std::string::npos)
      << missing.output;

  Watched stuck = run_watched(hosts.launch(dir, trusted(fit_args(dir, "multiworker", dir.file("stuck"), 3))), dir, 120,
                              "stuck.log", {"TANDEM_TEST_FAULT=hang:2:3"});
  EXPECT_NE(stuck.code, 0);
  EXPECT_FALSE(stuck.killed) << stuck.output;
  EXPECT_NE(stuck.output.find(fmt::format("rank 2 (host {})", hosts.host(3))), std::string::npos) << stuck.output;
}

TEST(Launch, AProgramThatIsNotThereIsNamedBeforeMpirunStarts) {
  TempDir dir;
  Watched missing = run_watched({TANDEM_CLI, "launch", "-np", "2", "--", "./no-such-program"}, dir, 60);
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.output.find("launch: no such program \"./no-such-program\" on this machine (no file at that "
                                "path); on other hosts it must exist at the same path"),
            std::string::npos)
      << missing.output;
  Watched not_on_path = run_watched({TANDEM_CLI, "launch", "-np", "2", "--", "no-such-program-on-path"}, dir, 60);
  EXPECT_NE(not_on_path.output.find("\"no-such-program-on-path\" on this machine (not found on PATH)"),
            std::string::npos)
      << not_on_path.output;
  io::write_file_atomically(dir.file("script.sh"), "#!/bin/sh\n");
  Watched not_executable = run_watched({TANDEM_CLI, "launch", "-np", "2", "--", "./script.sh"}, dir, 60);
  EXPECT_NE(not_executable.output.find("launch: \"./script.sh\" is not executable"), std::string::npos)
      << not_executable.output;
}

// Waiting ranks yield their cores (two ranks sharing one crawled, each polling out the other's
// time slice), unless the user set it: in the environment, or through --mpirun-arg.
TEST(Launch, WaitingRanksYieldTheirCoresUnlessTheUserSaysOtherwise) {
  TempDir dir;
  Watched plain = run_watched({TANDEM_CLI, "launch", "-np", "2", "--dry-run", "--", "/bin/true"}, dir, 60);
  EXPECT_EQ(plain.code, 0) << plain.output;
  EXPECT_NE(plain.output.find(" --mca mpi_yield_when_idle 1 "), std::string::npos) << plain.output;
  Watched by_env = run_watched({TANDEM_CLI, "launch", "-np", "2", "--dry-run", "--", "/bin/true"}, dir, 60, "env.log",
                               {"OMPI_MCA_mpi_yield_when_idle=0"});
  EXPECT_EQ(by_env.output.find("mpi_yield_when_idle"), std::string::npos) << by_env.output;
  Watched by_arg = run_watched({TANDEM_CLI, "launch", "-np", "2", "--dry-run", "--mpirun-arg", "--mca", "--mpirun-arg",
                                "mpi_yield_when_idle", "--mpirun-arg", "0", "--", "/bin/true"},
                               dir, 60, "arg.log");
  EXPECT_EQ(by_arg.output.find("mpi_yield_when_idle 1"), std::string::npos) << by_arg.output;
  EXPECT_NE(by_arg.output.find("--mca mpi_yield_when_idle 0"), std::string::npos) << by_arg.output;
}

TEST(Launch, TfConfigMistakesAreNamed) {
  TempDir dir;
  auto launch = [&](const std::string& config) {
    return run_watched({TANDEM_CLI, "launch", "--tf-config", config, "--", "true"}, dir, 60);
  };
  Watched bad_json = launch("{\"cluster\": ");
  EXPECT_NE(bad_json.code, 0);
  EXPECT_NE(bad_json.output.find("TF_CONFIG is not valid JSON"), std::string::npos) << bad_json.output;
  Watched out_of_range =
      launch(R"({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 2}})");
  EXPECT_NE(out_of_range.code, 0);
  EXPECT_NE(out_of_range.output.find("task index 2 is out of range: the cluster lists 2 worker tasks"),
            std::string::npos)
      << out_of_range.output;
  Watched missing =
      launch(R"({"cluster": {"worker": ["127.0.0.1:1", "no-such-host.invalid:2"]}, "task": {"index": 0}})");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.output.find("task worker:1 (\"no-such-host.invalid:2\")"), std::string::npos) << missing.output;
  Watched other_task = launch(R"({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"index": 1}})");
  EXPECT_EQ(other_task.code, 0);
  EXPECT_NE(other_task.output.find("nothing to start here"), std::string::npos) << other_task.output;
  Watched dry = run_watched({TANDEM_CLI, "launch", "--dry-run", "--tf-config",
                             R"({"cluster": {"chief": ["hosta:1"], "worker": ["hostb:2", "hostb:3"]}})", "--", "x"},
                            dir, 60);
  EXPECT_NE(dry.output.find("does not resolve"), std::string::npos) << dry.output;  // hosta is no host here
  // A parameter-server cluster: the chief's launch starts it (the others' have nothing to start);
  // a host that does not resolve is named before anything starts.
  Watched ps_task = launch(
      R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}, "task": {"type": "ps"}})");
  EXPECT_EQ(ps_task.code, 0) << ps_task.output;
  EXPECT_NE(ps_task.output.find("task ps:0: the chief starts every task of the cluster; nothing to start here"),
            std::string::npos)
      << ps_task.output;
  Watched ps_missing =
      launch(R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["no-such-host.invalid:3"]}})");
  EXPECT_NE(ps_missing.code, 0);
  EXPECT_NE(ps_missing.output.find("task ps:0 (\"no-such-host.invalid:3\")"), std::string::npos) << ps_missing.output;
}

}  // namespace
}  // namespace tandem::testing
