#pragma once
// Running the real `tandem` binary from a test: a child process in the directory of its log, its
// output captured; and the small MNIST-layout datasets those runs train on.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tandem/io.h"
#include "tandem/random.h"
#include "test_util.h"

namespace tandem::testing {

// Runs the CLI with `args` in the directory of `log` (so that defaults such as ./data and
// ./checkpoints resolve there), without $TANDEM_DATA; returns the child's pid.
// argv[0] started with `argv`, its output to `log`, in log's directory.
inline pid_t spawn_program(const std::vector<std::string>& argv, const std::string& log, void (*in_child)() = nullptr) {
  pid_t pid = fork();
  if (pid == 0) {
    if (in_child) in_child();  // what a launcher would set: an affinity mask, an environment
    if (chdir(std::filesystem::path(log).parent_path().c_str()) != 0) _exit(126);
    unsetenv("TANDEM_DATA");
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> raw;
    for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
    raw.push_back(nullptr);
    execvp(raw[0], raw.data());
    _exit(127);
  }
  return pid;
}

// The tandem command with `args`.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& log, void (*in_child)() = nullptr) {
  std::vector<std::string> argv{TANDEM_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn_program(argv, log, in_child);
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Outcome {
  int code;
  std::string output;
};
inline Outcome run(const std::vector<std::string>& args, const TempDir& dir, void (*in_child)() = nullptr) {
  std::string log = dir.file("out.log");
  int code = wait_exit(spawn(args, log, in_child));
  return {code, io::read_file(log)};
}

inline void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> b = idx_bytes(dims, payload);
  io::write_file_atomically(path, std::string(b.begin(), b.end()));
}

// An MNIST-layout dataset whose class is written into the image, so that it can be learned.
inline void make_mnist(const std::string& dir, uint32_t train, uint32_t test) {
  std::filesystem::create_directories(dir);
  Philox rng(17);
  for (auto [prefix, n] : {std::pair{"train", train}, std::pair{"t10k", test}}) {
    std::vector<uint8_t> images(n * 784), labels(n);
    for (uint32_t i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(i % 10);
      for (uint32_t p = 0; p < 784; ++p)
        images[i * 784 + p] =
            static_cast<uint8_t>(rng.bits(uint64_t{i} * 784 + p) % 64 + (p / 78 == labels[i] ? 160 : 0));
    }
    write_idx(dir + "/" + prefix + "-images-idx3-ubyte", {n, 28, 28}, images);
    write_idx(dir + "/" + prefix + "-labels-idx1-ubyte", {n}, labels);
  }
}

// A command (argv[0] found on PATH) in a process group of its own, in `dir`, its output captured,
// under a watchdog: past `limit_s` seconds the whole group is killed. The group is killed at the
// end in any case, so that no child (an MPI rank that hangs) outlives the test. The commands run
// here are launches: in the ASan build their ranks do not check for leaks, because Open MPI's
// finalize leaves allocations of components it has already unloaded (their stacks cannot be
// named, so not suppressed); Tandem's own code is leak-checked by the in-process tests.
struct Watched {
  int code = -1;
  std::string output;
  double seconds = 0;
  bool killed = false;  // by the watchdog
};
// `args` started as run_watched starts it (a process group of its own, in `dir`, its output to
// `log`, with `env` added), not waited for: its pid, which is also its group's.
inline pid_t spawn_group(const std::vector<std::string>& args, const TempDir& dir, const std::string& log,
                         const std::vector<std::string>& env = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    putenv(const_cast<char*>("ASAN_OPTIONS=detect_leaks=0"));
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    unsetenv("TANDEM_DATA");
    if (chdir(dir.path().c_str()) != 0) _exit(126);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

inline Watched run_watched(const std::vector<std::string>& args, const TempDir& dir, double limit_s,
                           const std::string& log_name = "watched.log", const std::vector<std::string>& env = {}) {
  std::string log = dir.file(log_name);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = spawn_group(args, dir, log, env);
  Watched out;
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (took.count() > limit_s && !out.killed) {
      out.killed = true;
      kill(-pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kill(-pid, SIGKILL);
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  out.output = io::read_file(log);
  return out;
}

// Why the MPI tests cannot run here ("" when they can): no MPI in the build, or no mpirun.
inline std::string why_no_mpi(bool built_with_mpi) {
  if (!built_with_mpi) return "skipped: this build has no MPI (libopenmpi-dev)";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) return "skipped: mpirun is not installed (openmpi-bin)";
  return "";
}

// Every tensor of a safetensors file, as its bytes (bit for bit: -0 is not +0, a NaN is its own
// bits), in the file's order.
inline std::vector<std::pair<std::string, std::vector<uint8_t>>> final_bytes(const std::string& path) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (auto& [name, t] : io::load_safetensors(path).tensors) {
    Tensor c = t.contiguous();
    const auto* p = static_cast<const uint8_t*>(c.raw());
    out.emplace_back(name, std::vector<uint8_t>(p, p + c.numel() * static_cast<int64_t>(dtype_size(c.dtype()))));
  }
  return out;
}

// Every tensor of a safetensors file, as floats, in the file's order.
inline std::vector<std::pair<std::string, std::vector<float>>> final_state(const std::string& path) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (auto& [name, t] : io::load_safetensors(path).tensors)
    out.emplace_back(name, t.astype(DType::Float32).to_vector());
  return out;
}

}  // namespace tandem::testing
