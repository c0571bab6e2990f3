// The cores this process may use and how many of them other processes leave free. Sampling
// reads two small /proc files with plain system calls (no allocation: it runs inside training
// steps) and happens at most every 20 ms, from whichever thread asks first.
#include "core/cpu_budget.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

namespace tandem::core {
namespace {

using Clock = std::chrono::steady_clock;

// Reads a small file into buf (NUL-terminated); the byte count, or -1.
ssize_t read_small(const char* path, char* buf, size_t size) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = ::read(fd, buf, size - 1);
  ::close(fd);
  buf[n < 0 ? 0 : n] = '\0';
  return n;
}

long long parse_number(const char* begin, const char* end, const char** next = nullptr) {
  while (begin < end && (*begin == ' ' || *begin == '\t')) ++begin;
  long long v = -1;
  auto [p, ec] = std::from_chars(begin, end, v);
  if (next) *next = p;
  return ec == std::errc() ? v : -1;
}

// cgroup v2 "cpu.max" ("max 100000" or "QUOTA PERIOD") or v1 cfs files, for the process's own
// cgroup and each parent: the smallest limit wins. 0 when there is none.
int cgroup_quota_cores() {
  char buf[4096];
  if (read_small("/proc/self/cgroup", buf, sizeof buf) <= 0) return 0;
  int best = 0;
  auto consider = [&](double cores) {
    int c = std::max(1, static_cast<int>(cores + 0.999));
    best = best == 0 ? c : std::min(best, c);
  };
  for (char* line = buf; line && *line;) {
    char* end = std::strchr(line, '\n');
    if (end) *end = '\0';
    // "ID:CONTROLLERS:PATH"
    char* first = std::strchr(line, ':');
    char* second = first ? std::strchr(first + 1, ':') : nullptr;
    if (second) {
      std::string controllers(first + 1, second), path(second + 1);
      bool v2 = controllers.empty(), v1 = ("," + controllers + ",").find(",cpu,") != std::string::npos;
      for (;;) {
        char file[512];
        if (v2) {
          std::snprintf(file, sizeof file, "/sys/fs/cgroup%s/cpu.max", path == "/" ? "" : path.c_str());
          char value[128];
          if (read_small(file, value, sizeof value) > 0 && std::strncmp(value, "max", 3) != 0) {
            const char* next = nullptr;
            long long quota = parse_number(value, value + std::strlen(value), &next);
            long long period = parse_number(next, value + std::strlen(value));
            if (quota > 0 && period > 0) consider(static_cast<double>(quota) / static_cast<double>(period));
          }
        } else if (v1) {
          for (const char* mount : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
            char quota_s[64], period_s[64];
            std::snprintf(file, sizeof file, "%s%s/cpu.cfs_quota_us", mount, path == "/" ? "" : path.c_str());
            if (read_small(file, quota_s, sizeof quota_s) <= 0) continue;
            std::snprintf(file, sizeof file, "%s%s/cpu.cfs_period_us", mount, path == "/" ? "" : path.c_str());
            if (read_small(file, period_s, sizeof period_s) <= 0) continue;
            long long quota = parse_number(quota_s, quota_s + std::strlen(quota_s));
            long long period = parse_number(period_s, period_s + std::strlen(period_s));
            if (quota > 0 && period > 0) consider(static_cast<double>(quota) / static_cast<double>(period));
            break;
          }
        }
        if (path == "/" || path.empty() || (!v1 && !v2)) break;
        size_t slash = path.find_last_of('/');
        path = slash == 0 ? "/" : path.substr(0, slash);
      }
    }
    line = end ? end + 1 : nullptr;
  }
  return best;
}

CoreBudget read_budget() {
  CoreBudget b;
  b.online = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  cpu_set_t set;
  CPU_ZERO(&set);
  b.affinity = ::sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : b.online;
  b.quota = cgroup_quota_cores();
  b.usable = b.quota > 0 ? std::min(b.affinity, b.quota) : b.affinity;
  return b;
}

// This process's threads in state R (running or runnable) now.
int own_running_threads() {
  int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 1;
  int running = 0;
  alignas(8) char entries[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, entries, sizeof entries);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      auto* d = reinterpret_cast<struct dirent64*>(entries + at);
      at += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      char path[320], stat[512];
      std::snprintf(path, sizeof path, "/proc/self/task/%s/stat", d->d_name);
      if (read_small(path, stat, sizeof stat) <= 0) continue;
      const char* paren = std::strrchr(stat, ')');  // the command name may hold spaces and parentheses
      if (paren && paren[1] == ' ' && paren[2] == 'R') ++running;
    }
  }
  ::close(dir);
  return std::max(running, 1);  // the sampling thread itself is running
}

// Runnable tasks of the whole machine now: the fourth field of /proc/loadavg, "R/TOTAL".
int machine_running_tasks() {
  char buf[128];
  if (read_small("/proc/loadavg", buf, sizeof buf) <= 0) return -1;
  const char* p = buf;
  for (int field = 0; field < 3 && p; ++field) {
    p = std::strchr(p, ' ');
    if (p) ++p;
  }
  return p ? static_cast<int>(parse_number(p, buf + std::strlen(buf))) : -1;
}

constexpr auto kSampleEvery = std::chrono::milliseconds(20);
constexpr int kSamples = 5;

struct Sampler {
  std::atomic<int64_t> next_sample{0};  // steady-clock ns before which nobody samples
  std::atomic<int> free{0};             // the median of the samples; 0 before the first
  std::mutex mutex;                     // held by the one thread sampling; the rest never wait
  std::array<int, kSamples> samples{};
  int count = 0, at = 0;
  int64_t last = 0;
};
Sampler& sampler() {
  static Sampler s;
  return s;
}

int sample_free_cores(const CoreBudget& b) {
  int running = machine_running_tasks();
  if (running < 0) return b.usable;  // no /proc: assume the cores are ours
  int others = std::max(0, running - own_running_threads());
  return std::clamp(b.online - others, 1, b.usable);
}

}  // namespace

const CoreBudget& core_budget() {
  static const CoreBudget budget = read_budget();
  return budget;
}

int free_cores() {
  const CoreBudget& b = core_budget();
  if (b.usable == 1) return 1;
  Sampler& s = sampler();
  int64_t now = Clock::now().time_since_epoch().count();
  if (now >= s.next_sample.load(std::memory_order_relaxed) && s.mutex.try_lock()) {
    std::lock_guard lock(s.mutex, std::adopt_lock);
    if (now >= s.next_sample.load(std::memory_order_relaxed)) {  // nobody sampled since we looked
      s.next_sample.store(now + std::chrono::nanoseconds(kSampleEvery).count(), std::memory_order_relaxed);
      if (now - s.last > 10 * std::chrono::nanoseconds(kSampleEvery).count()) s.count = s.at = 0;  // stale: start over
      s.last = now;
      s.samples[static_cast<size_t>(s.at)] = sample_free_cores(b);
      s.at = (s.at + 1) % kSamples;
      s.count = std::min(s.count + 1, kSamples);
      // The samples held are slots [0, count): the ring starts at slot 0 and wraps only when full.
      std::array<int, kSamples> sorted = s.samples;
      for (int i = 1; i < s.count; ++i)  // insertion sort of at most five
        for (int j = i; j > 0 && sorted[static_cast<size_t>(j - 1)] > sorted[static_cast<size_t>(j)]; --j)
          std::swap(sorted[static_cast<size_t>(j - 1)], sorted[static_cast<size_t>(j)]);
      int median = sorted[static_cast<size_t>(s.count / 2)];
      s.free.store(median, std::memory_order_relaxed);
    }
  }
  int free = s.free.load(std::memory_order_relaxed);
  return free > 0 ? free : b.usable;
}

std::chrono::nanoseconds spin_allowance(int threads) {
  if (threads > free_cores()) return std::chrono::nanoseconds(0);
  return kSpinAllowance;
}

}  // namespace tandem::core
