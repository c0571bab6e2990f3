// Processes the commands start (launch's checks, compare's workers) and what this one used.
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "cli/common.h"

namespace tandem::cli {

std::optional<std::pair<double, std::string>> number_and_unit(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return std::make_pair(value, text.substr(used));
}

void exec_command(std::vector<std::string> args, const std::string& who) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "%scannot run %s: %s\n", who.c_str(), argv[0], std::strerror(errno));
  _exit(127);
}

std::optional<int> run_command(std::vector<std::string> args, std::string* output, double timeout_s) {
  int out[2] = {-1, -1};
  if (output != nullptr && pipe(out) != 0) fail("cannot make a pipe: {}", std::strerror(errno));
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) fail("cannot start {}: {}", args[0], std::strerror(errno));
  if (pid == 0) {
    if (output != nullptr) {
      dup2(out[1], 1);
      dup2(out[1], 2);
      close(out[0]);
    }
    exec_command(args, "");
  }
  if (output != nullptr) close(out[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    if (output != nullptr) {
      pollfd p{out[0], POLLIN, 0};
      char buffer[512];
      ssize_t n = poll(&p, 1, 50) > 0 ? read(out[0], buffer, sizeof buffer) : 0;
      if (n > 0 && output->size() < 4096) output->append(buffer, static_cast<size_t>(n));
    } else if (timeout_s > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (waitpid(pid, &status, output == nullptr && timeout_s <= 0 ? 0 : WNOHANG) == pid) break;
    if (timeout_s > 0 && std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      if (output != nullptr) close(out[0]);
      return std::nullopt;
    }
  }
  if (output != nullptr) {
    close(out[0]);
    while (!output->empty() && (output->back() == '\n' || output->back() == '\r')) output->pop_back();
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

}  // namespace tandem::cli
