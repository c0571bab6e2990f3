// `tandem launch --ps P --workers W -- COMMAND`: a parameter-server cluster on this machine, on
// loopback ports chosen free at run time; `tandem launch --tf-config JSON -- COMMAND` (the chief's
// TF_CONFIG, or one naming no task): the cluster it lists, each task on its host. Every task (the
// chief, the workers, the servers) runs COMMAND with its TF_CONFIG: here as a child, on another
// host through the agent (ssh, or --rsh-agent), in the launcher's directory, with the launcher's
// TANDEM_*, OMP_NUM_THREADS, PATH and LD_LIBRARY_PATH. The launcher supervises them: the chief's
// exit status is the job's; when the chief ends, the others have a few seconds to end by
// themselves (the chief stops them) before they are killed; a worker or server that dies while the
// chief runs is started again (--restarts times at most, each: an asynchronous job takes it back);
// when the launcher is interrupted
// (SIGINT, SIGTERM, SIGHUP) every task is stopped, and if the launcher itself is killed the tasks
// die with it: children by PR_SET_PDEATHSIG, a task on another host when its standard input (a
// pipe from the launcher, through the agent) closes.
#include <fcntl.h>
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
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/common.h"
#include "tandem/distribute/cluster.h"
#include "tandem/runtime.h"

extern char** environ;

namespace tandem::cli {
namespace {

volatile sig_atomic_t interrupted = 0;
void on_signal(int signal) { interrupted = signal; }

// Whether a TCP port on 127.0.0.1 is free to bind now (closed again at once).
bool port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("launch: cannot make a TCP socket: {}", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return free;
}

// `count` distinct free TCP ports on 127.0.0.1, drawn at random outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port from that range could meanwhile become the source port
// of some connection, even one of this job's own tasks, before the task that owns it listens.
std::vector<int> free_ports(int count) {
  int low = 32768, high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  // The larger of the spans below and above the ephemeral range, keeping clear of well-known ports.
  int first = 10000, last = low - 1;
  if (last - first < 65535 - high) first = high + 1, last = 65535;
  if (last - first < 1000) first = 1024, last = 65535;  // an unusual range: anywhere unprivileged
  std::mt19937 draw(std::random_device{}());
  std::uniform_int_distribution<int> pick(first, last);
  std::vector<int> ports;
  for (int tries = 0; static_cast<int>(ports.size()) < count; ++tries) {
    if (tries == 10000) fail("launch: found no {} free TCP ports on 127.0.0.1 in {}-{}", count, first, last);
    int port = pick(draw);
    if (std::find(ports.begin(), ports.end(), port) == ports.end() && port_free(port)) ports.push_back(port);
  }
  return ports;
}

struct Task {
  distribute::TaskId id;
  pid_t pid = -1;
  int status = -1;   // once ended: the exit status (128 + signal)
  int feed = -1;     // a task on another host: the write end of its standard input
  int restarts = 0;  // times started again
};

// What a task's environment takes from the launcher's, besides TF_CONFIG.
std::vector<std::pair<std::string, std::string>> forwarded_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* equals = std::strchr(*e, '=');
    if (equals == nullptr) continue;
    std::string name(*e, static_cast<size_t>(equals - *e));
    if (name.starts_with("TANDEM_") || name == "OMP_NUM_THREADS" || name == "PATH" || name == "LD_LIBRARY_PATH")
      out.emplace_back(name, equals + 1);
  }
  return out;
}

std::string quoted(const std::string& text) {  // for a POSIX shell
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The shell line an agent runs on another host: the task in the launcher's directory with its
// environment, ended when the line's standard input (the launcher's pipe) closes.
std::string remote_line(const std::vector<std::string>& command, const std::string& tf_config) {
  std::string line = "exec 3<&0; ";
  char cwd[4096] = {};
  if (getcwd(cwd, sizeof cwd - 1) != nullptr) line += "cd " + quoted(cwd) + " 2>/dev/null; ";
  line += "export TF_CONFIG=" + quoted(tf_config);
  for (const auto& [name, value] : forwarded_environment()) line += " " + name + "=" + quoted(value);
  line += ";";
  for (const std::string& a : command) line += " " + quoted(a);
  // (A shell gives background commands /dev/null as input unless told otherwise: hence fd 3.)
  line +=
      " </dev/null 3<&- & t=$!; { cat >/dev/null 2>&1; kill -TERM $t 2>/dev/null; } <&3 & w=$!; exec 3<&-; "
      "wait $t; s=$?; kill $w 2>/dev/null; exit $s";
  return line;
}

// A task's process: `args` with `env` set, the launcher's signal handlers undone, ended with the
// launcher (PR_SET_PDEATHSIG); `input` (>= 0) as its standard input.
pid_t start(const std::vector<std::string>& args, int input,
            const std::vector<std::pair<std::string, std::string>>& env) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) fail("launch: cannot start a task: {}", std::strerror(errno));
  if (pid > 0) return pid;
  if (input >= 0) dup2(input, STDIN_FILENO);  // without O_CLOEXEC
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the launcher already gone
  for (int s : {SIGINT, SIGTERM, SIGHUP}) signal(s, SIG_DFL);
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  exec_command(args, "launch: ");
}

// A task here: COMMAND with its TF_CONFIG (and OMP_NUM_THREADS unless the launcher has one).
pid_t start_here(const std::vector<std::string>& command, const std::string& tf_config, int threads) {
  std::vector<std::pair<std::string, std::string>> env{{"TF_CONFIG", tf_config}};
  if (std::getenv("OMP_NUM_THREADS") == nullptr) env.emplace_back("OMP_NUM_THREADS", std::to_string(threads));
  return start(command, -1, env);
}

// A task on another host: `agent host LINE` (srun: `srun ... host /bin/sh -c LINE`) with a pipe from
// the launcher as its standard input.
pid_t start_remote(const std::vector<std::string>& agent, const std::string& host, const std::string& line, int* feed) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("launch: cannot make a pipe: {}", std::strerror(errno));
  std::vector<std::string> args = agent;
  args.push_back(host);
  if (agent[0] == "srun") args.insert(args.end(), {"/bin/sh", "-c"});
  args.push_back(line);
  pid_t pid = start(args, fds[0], {});
  close(fds[0]);
  *feed = fds[1];
  return pid;
}

void reaped(Task& t, int status) {
  t.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (t.feed >= 0) close(t.feed);
  t.feed = -1;
}

// Ends every task still running: SIGTERM here, its input closed on another host; then SIGKILL
// after `grace`.
void end_all(std::vector<Task>& tasks, std::chrono::milliseconds grace) {
  for (Task& t : tasks) {
    if (t.status >= 0) continue;
    if (t.feed >= 0) {
      close(t.feed);
      t.feed = -1;
    } else {
      kill(t.pid, SIGTERM);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (true) {
    bool running = false;
    for (Task& t : tasks) {
      int status = 0;
      if (t.status < 0 && waitpid(t.pid, &status, WNOHANG) == t.pid) reaped(t, status);
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
      reaped(t, status);
    }
}

}  // namespace

distribute::ClusterSpec loopback_cluster(int servers, int workers) {
  std::vector<int> ports = free_ports(1 + workers + servers);
  auto address = [&](int i) { return "127.0.0.1:" + std::to_string(ports[static_cast<size_t>(i)]); };
  std::vector<std::string> chief{address(0)}, worker, ps;
  for (int i = 0; i < workers; ++i) worker.push_back(address(1 + i));
  for (int i = 0; i < servers; ++i) ps.push_back(address(1 + workers + i));
  nlohmann::json spec = {{"cluster", {{"chief", chief}, {"worker", worker}, {"ps", ps}}}};
  return distribute::ClusterSpec::parse(spec.dump(), "launch");
}

int run_cluster_launch(const distribute::ClusterSpec& cluster, const std::vector<std::string>& command,
                       const std::string& rsh_agent, double timeout, int restarts, bool dry_run, bool slurm) {
  cluster.require({"chief", "worker", "ps"}, {"chief", "worker", "ps"}, "launch: a parameter-server cluster");
  std::vector<Task> tasks{{{"chief", 0}}};
  for (int i = 0; i < cluster.count("worker"); ++i) tasks.push_back({{"worker", i}});
  for (int i = 0; i < cluster.count("ps"); ++i) tasks.push_back({{"ps", i}});
  std::vector<std::string> agent{"ssh", "-o", "BatchMode=yes"};
  if (!rsh_agent.empty()) agent = {rsh_agent};
  if (slurm) agent = slurm_step_agent();
  // Workers here share this machine's cores; the chief and the servers mostly wait. A task on
  // another host uses its machine's (OMP_NUM_THREADS, where set here, goes with it).
  int workers_here = 0;
  for (const Task& t : tasks) workers_here += t.id.type == "worker" && is_this_machine(cluster.host(t.id)) ? 1 : 0;
  int per_worker = std::max(1, usable_cores() / std::max(1, workers_here));
  auto threads = [&](const Task& t) { return t.id.type == "worker" ? per_worker : 1; };
  auto here = [&](const Task& t) { return !slurm && is_this_machine(cluster.host(t.id)); };
  if (dry_run) {
    for (const Task& t : tasks) {
      std::string line;
      for (const std::string& a : command) line += (line.empty() ? "" : " ") + a;
      if (here(t)) {
        std::printf("TF_CONFIG='%s' OMP_NUM_THREADS=%d %s\n", cluster.to_json(t.id).c_str(), threads(t), line.c_str());
      } else {
        std::string through;
        for (const std::string& a : agent) through += a + " ";
        std::printf("%s%s %s\n", through.c_str(), cluster.host(t.id).c_str(),
                    quoted(remote_line(command, cluster.to_json(t.id))).c_str());
      }
    }
    return 0;
  }
  std::vector<RemoteTask> remote;
  for (const Task& t : tasks)
    if (!here(t)) remote.push_back({t.id.str(), cluster.address(t.id), cluster.host(t.id)});
  check_tasks_start(remote, rsh_agent, timeout, slurm);
  struct sigaction action {};
  action.sa_handler = on_signal;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &action, nullptr);
  setenv("TANDEM_STDOUT_IS_TERMINAL", isatty(STDOUT_FILENO) != 0 ? "1" : "0", 1);
  auto start_task = [&](Task& t) {
    t.status = -1;
    t.pid = here(t) ? start_here(command, cluster.to_json(t.id), threads(t))
                    : start_remote(agent, cluster.host(t.id), remote_line(command, cluster.to_json(t.id)), &t.feed);
  };
  for (Task& t : tasks) start_task(t);
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
        reaped(t, status);
        if (t.status != 0 && !chief_ended)
          std::fprintf(stderr, "launch: task %s (%s) ended with status %d\n", t.id.str().c_str(),
                       cluster.address(t.id).c_str(), t.status);
        if (t.id.type == "chief") chief_ended = std::chrono::steady_clock::now();
        if (t.status != 0 && !chief_ended && t.id.type != "chief" && t.restarts < restarts) {
          ++t.restarts;
          std::fprintf(stderr, "launch: starting task %s again (restart %d of %d)\n", t.id.str().c_str(), t.restarts,
                       restarts);
          start_task(t);
        }
      }
      running = running || t.status < 0;
    }
    if (!running) break;
    // A chief that failed has told the others (its control connections); one that finished has
    // stopped them: either way they have `grace` to end by themselves (less after a failure).
    auto allowed = tasks[0].status == 0 ? grace : std::chrono::milliseconds(1000);
    if (chief_ended && std::chrono::steady_clock::now() - *chief_ended > allowed) {
      // Named, not ended silently: a task that outlives the job is stopped (SIGSTOP, a debugger)
      // or stuck, and what it had not finished (its last line, its exit) is lost.
      for (const Task& t : tasks)
        if (t.status < 0)
          std::fprintf(stderr,
                       "launch: task %s (%s) had not ended %.1f s after the chief %s (it is stopped or stuck): "
                       "ending it\n",
                       t.id.str().c_str(), cluster.address(t.id).c_str(),
                       std::chrono::duration<double>(allowed).count(), tasks[0].status == 0 ? "finished" : "failed");
      end_all(tasks, std::chrono::milliseconds(1000));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return tasks[0].status;
}

}  // namespace tandem::cli
