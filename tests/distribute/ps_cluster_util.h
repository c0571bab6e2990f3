#pragma once
// What the parameter-server cluster tests share: a cluster under `tandem launch --ps P --workers W`
// (watched, or in the background), a task's process found by its TF_CONFIG, two runs' final weights
// compared, and a command's output.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_util.h"

namespace tandem::testing {

// `command`'s standard output, trailing newlines dropped.
inline void run_command_output(const std::string& command, std::string* out) {
  out->clear();
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[256];
  while (pipe != nullptr && std::fgets(buffer, sizeof buffer, pipe) != nullptr) *out += buffer;
  if (pipe != nullptr) pclose(pipe);
  while (!out->empty() && out->back() == '\n') out->pop_back();
}

// A pgrep pattern for `path` that the shell running pgrep does not match itself.
inline std::string unquoted_pattern(const std::string& path) { return "[" + path.substr(0, 1) + "]" + path.substr(1); }

inline Watched launch_cluster(const TempDir& dir, int servers, int workers, const std::vector<std::string>& fit_args,
                              const std::string& log, double limit_s = 120, const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{
      TANDEM_CLI, "launch",   "--ps", std::to_string(servers), "--workers", std::to_string(workers),
      "--",       TANDEM_CLI, "fit"};
  argv.insert(argv.end(), fit_args.begin(), fit_args.end());
  return run_watched(argv, dir, limit_s, log, env);
}

// Tolerance 0: every tensor of the two files (weights, slots, metrics, the step count) byte for byte.
inline void expect_same_state(const std::string& a, const std::string& b, double tolerance, const std::string& what) {
  if (tolerance == 0) {
    auto x = final_bytes(a), y = final_bytes(b);
    ASSERT_EQ(x.size(), y.size()) << what;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(x[i].first, y[i].first) << what;
      EXPECT_TRUE(x[i].second == y[i].second) << what << ": " << x[i].first << " differs in its bytes";
    }
    return;
  }
  auto x = final_state(a), y = final_state(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].first, y[i].first) << what;
    if (x[i].first.starts_with("metric") || x[i].first == "optimizer/iterations") continue;
    // Relative to the tensor's scale: elementwise, Adam's normalized steps magnify the last bits of
    // gradients near zero, which the order of a sum changes.
    float scale = 0;
    for (float v : x[i].second) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < x[i].second.size(); ++k)
      ASSERT_LE(std::fabs(x[i].second[k] - y[i].second[k]), tolerance * scale)
          << what << ": " << x[i].first << "[" << k << "] of a tensor whose largest magnitude is " << scale;
  }
}

// The most steps ahead of the slowest worker any push was, by every server's log line.
inline int64_t most_ahead(const std::string& output) {
  std::regex line("steps their worker was ahead of the slowest: p50 [0-9]+, p90 [0-9]+, p99 [0-9]+, max ([0-9]+) \\(");
  int64_t most = -1;
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    most = std::max<int64_t>(most, std::stoll((*it)[1].str()));
  return most;
}

// Three workers with one backup, worker 1 a straggler, `steps` steps in all: its gradients are
// dropped as stale (all but at most one per epoch's end), the fast workers' almost never, and the
// workers' log lines and the chief's progress lines count the same drops.
inline void expect_backup_worker_drops(const std::string& output, int64_t steps) {
  std::map<int, std::pair<int64_t, int64_t>> by_worker;  // steps, dropped
  std::regex line("worker:([0-9]+) \\([^)]*\\): ([0-9]+) steps, ([0-9]+) of them dropped as stale");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    by_worker[std::stoi((*it)[1].str())] = {std::stoll((*it)[2].str()), std::stoll((*it)[3].str())};
  ASSERT_EQ(by_worker.size(), 3u) << output;
  auto [slow_steps, slow_dropped] = by_worker[1];
  EXPECT_GT(slow_dropped, 0) << output;
  // All but at most one per epoch's end, where a round left short takes the next gradient computed
  // on its version, the straggler's included (and a fast worker's may then come too late).
  EXPECT_GE(slow_dropped, slow_steps - 2) << output;
  EXPECT_LE(by_worker[0].second + by_worker[2].second, 2) << output;
  int64_t reported = 0;
  std::regex dropped("dropped: ([0-9.]+)");
  for (std::sregex_iterator it(output.begin(), output.end(), dropped), end; it != end; ++it)
    reported += static_cast<int64_t>(std::stod((*it)[1].str()));
  // The progress lines count every drop, never silent.
  EXPECT_EQ(reported, by_worker[0].second + slow_dropped + by_worker[2].second) << output;
  // The count per worker is the chief's total of steps.
  EXPECT_EQ(by_worker[0].first + by_worker[1].first + by_worker[2].first, steps) << output;
}

// A launch running in the background, in a process group of its own that is killed when the test
// ends (its watchdog: `wait` gives up after the limit).
class Background {
 public:
  Background(const TempDir& dir, const std::vector<std::string>& argv, const std::string& log_name,
             const std::string& tf_config = "")
      : log_(dir.file(log_name)) {
    static std::string config;  // for the child, which takes no captures
    config = tf_config.empty() ? "" : "TF_CONFIG=" + tf_config;
    pid_ = spawn_program(argv, log_, [] {
      setpgid(0, 0);
      putenv(const_cast<char*>("ASAN_OPTIONS=detect_leaks=0"));
      if (!config.empty()) putenv(config.data());
    });
    setpgid(pid_, pid_);
  }
  ~Background() {
    kill(-pid_, SIGKILL);
    if (code_ < 0) waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  std::string said() const { return std::filesystem::exists(log_) ? io::read_file(log_) : std::string(); }
  bool wait_for(const std::string& text, double limit_s) const {
    auto start = std::chrono::steady_clock::now();
    while (said().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(limit_s)) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // The exit status, or -1 after `limit_s` (the group then killed).
  int wait(double limit_s) {
    auto start = std::chrono::steady_clock::now();
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(limit_s)) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return code_;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int code_ = -1;
};

// A task that a sanitizer stopped would be restarted and the job would go on: its report is
// looked for in the log.
inline void expect_no_sanitizer_report(const std::string& output) {
  for (const char* report : {"ERROR: AddressSanitizer", "runtime error:", "WARNING: ThreadSanitizer"})
    EXPECT_EQ(output.find(report), std::string::npos) << output;
}

// The TF_CONFIG a process runs with ("" if none).
inline std::string tf_config_of(pid_t pid) {
  std::string environment = io::read_file("/proc/" + std::to_string(pid) + "/environ");
  for (size_t at = 0; at < environment.size();) {
    size_t end = environment.find('\0', at);
    std::string entry = environment.substr(at, end - at);
    if (entry.starts_with("TF_CONFIG=")) return entry.substr(10);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

// The launcher's child that runs task `type`:`index` (by its TF_CONFIG), or -1.
inline pid_t task_pid(pid_t launcher, const std::string& type, int index) {
  std::string wanted = fmt::format("\"task\":{{\"index\":{},\"type\":\"{}\"}}", index, type);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string status;
    try {
      status = io::read_file(entry.path() / "status");
    } catch (const Error&) {
      continue;  // ended meanwhile
    }
    std::smatch parent;
    if (!std::regex_search(status, parent, std::regex("PPid:\\s+([0-9]+)")) || std::stoi(parent[1]) != launcher)
      continue;
    auto pid = static_cast<pid_t>(std::stoi(name));
    try {
      if (tf_config_of(pid).find(wanted) != std::string::npos) return pid;
    } catch (const Error&) {  // ended meanwhile
    }
  }
  return -1;
}

}  // namespace tandem::testing
