// `tandem launch --ps P --workers W -- COMMAND`: a parameter-server cluster on this machine. Every
// task (the chief, W workers, P servers) runs COMMAND with its TF_CONFIG, on loopback ports chosen
// free at run time. The launcher supervises them: the chief's exit status is the job's; when the
// chief ends, the others have a few seconds to end by themselves (the chief stops them) before
// they are killed; when the launcher is interrupted (SIGINT, SIGTERM, SIGHUP) every task is
// stopped, and if the launcher itself is killed the tasks die with it (PR_SET_PDEATHSIG).
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/common.h"
#include "tandem/distribute/cluster.h"
#include "tandem/runtime.h"

namespace tandem::cli {
namespace {

volatile sig_atomic_t interrupted = 0;
void on_signal(int signal) { interrupted = signal; }

// A free TCP port on 127.0.0.1 (the kernel's choice; released for the task to take).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) != 0)
    fail("launch: no free TCP port on 127.0.0.1: {}", std::strerror(errno));
  close(fd);
  return ntohs(a.sin_port);
}

struct Task {
  distribute::TaskId id;
  pid_t pid = -1;
  int status = -1;  // once ended: the exit status (128 + signal)
};

pid_t start(const std::vector<std::string>& command, const std::string& tf_config, int threads) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) fail("launch: cannot start a task: {}", std::strerror(errno));
  if (pid > 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the launcher already gone
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  setenv("TF_CONFIG", tf_config.c_str(), 1);
  if (std::getenv("OMP_NUM_THREADS") == nullptr) setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// Ends every task still running: SIGTERM, then SIGKILL after `grace`.
void end_all(std::vector<Task>& tasks, std::chrono::milliseconds grace) {
  for (Task& t : tasks)
    if (t.status < 0) kill(t.pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (true) {
    bool running = false;
    for (Task& t : tasks) {
      int status = 0;
      if (t.status < 0 && waitpid(t.pid, &status, WNOHANG) == t.pid)
        t.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      running = running || t.status < 0;
    }
    if (!running) return;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (Task& t : tasks)
    if (t.status < 0) {
      kill(t.pid, SIGKILL);
      int status = 0;
      waitpid(t.pid, &status, 0);
      t.status = 128 + SIGKILL;
    }
}

}  // namespace

int run_cluster_launch(int servers, int workers, const std::vector<std::string>& command, double timeout,
                       bool dry_run) {
  std::vector<std::string> chief{"127.0.0.1:" + std::to_string(free_port())}, worker, ps;
  for (int i = 0; i < workers; ++i) worker.push_back("127.0.0.1:" + std::to_string(free_port()));
  for (int i = 0; i < servers; ++i) ps.push_back("127.0.0.1:" + std::to_string(free_port()));
  nlohmann::json spec = {{"cluster", {{"chief", chief}, {"worker", worker}, {"ps", ps}}}};
  distribute::ClusterSpec cluster = distribute::ClusterSpec::parse(spec.dump(), "launch");
  std::vector<Task> tasks{{{"chief", 0}}};
  for (int i = 0; i < workers; ++i) tasks.push_back({{"worker", i}});
  for (int i = 0; i < servers; ++i) tasks.push_back({{"ps", i}});
  // Workers share the cores; the chief and the servers mostly wait.
  int per_worker = std::max(1, usable_cores() / workers);
  if (dry_run) {
    for (const Task& t : tasks)
      std::printf("TF_CONFIG='%s' OMP_NUM_THREADS=%d %s\n", cluster.to_json(t.id).c_str(),
                  t.id.type == "worker" ? per_worker : 1,
                  [&] {
                    std::string line;
                    for (const std::string& a : command) line += (line.empty() ? "" : " ") + a;
                    return line;
                  }()
                      .c_str());
    return 0;
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &action, nullptr);
  setenv("TANDEM_STDOUT_IS_TERMINAL", isatty(STDOUT_FILENO) != 0 ? "1" : "0", 1);
  for (Task& t : tasks) t.pid = start(command, cluster.to_json(t.id), t.id.type == "worker" ? per_worker : 1);
  auto grace = std::chrono::milliseconds(static_cast<int64_t>(1000 * std::min(timeout, 5.0)));
  std::optional<std::chrono::steady_clock::time_point> chief_ended;
  while (true) {
    if (interrupted != 0) {
      std::fprintf(stderr, "launch: %s: stopping the cluster's %zu tasks\n", strsignal(interrupted), tasks.size());
      end_all(tasks, std::chrono::milliseconds(2000));
      return 128 + interrupted;
    }
    bool running = false;
    for (Task& t : tasks) {
      int status = 0;
      if (t.status < 0 && waitpid(t.pid, &status, WNOHANG) == t.pid) {
        t.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (t.status != 0 && !chief_ended)
          std::fprintf(stderr, "launch: task %s (%s) ended with status %d\n", t.id.str().c_str(),
                       cluster.address(t.id).c_str(), t.status);
        if (t.id.type == "chief") chief_ended = std::chrono::steady_clock::now();
      }
      running = running || t.status < 0;
    }
    if (!running) break;
    // A chief that failed has told the others (its control connections); one that finished has
    // stopped them: either way they have `grace` to end by themselves (less after a failure).
    auto allowed = tasks[0].status == 0 ? grace : std::chrono::milliseconds(1000);
    if (chief_ended && std::chrono::steady_clock::now() - *chief_ended > allowed) {
      end_all(tasks, std::chrono::milliseconds(1000));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return tasks[0].status;
}

}  // namespace tandem::cli
