// The intra-op thread ceiling of each thread, and the account of it that `tandem fit --verbose 2`
// prints.
#include "tandem/runtime.h"

#include <cstdlib>
#include <string>

#include "core/cpu_budget.h"
#include "core/device_memory.h"
#include "core/isa.h"
#include "tandem/error.h"

namespace tandem {
namespace {

thread_local int thread_setting = 0;  // 0: automatic

// OMP_NUM_THREADS as a launcher sets it ("4", or a nested list "4,2" whose first level counts);
// 0 when unset or not a number.
int parse_omp_num_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (end == v || (*end != '\0' && *end != ',') || n < 1) return 0;
  return static_cast<int>(std::min<long>(n, kMaxThreads));
}

int omp_num_threads_env() {
  static const int from_env = parse_omp_num_threads();
  return from_env;
}

}  // namespace

void set_num_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    fail("set_num_threads: threads must be from 1 to {} (or 0 for automatic), got {}", kMaxThreads, threads);
  thread_setting = threads;
}

int num_threads_setting() { return thread_setting; }

int num_threads() {
  if (int device_threads = core::compute_device_threads(); device_threads > 0) return device_threads;
  if (thread_setting > 0) return thread_setting;
  return omp_num_threads_env() > 0 ? omp_num_threads_env() : core::core_budget().usable;
}

int usable_cores() { return core::core_budget().usable; }
int free_cores() { return core::free_cores(); }

std::string describe_threads() {
  const core::CoreBudget& b = core::core_budget();
  int ceiling = num_threads();
  std::string source = thread_setting > 0 ? fmt::format("set to {} (--threads or set_num_threads)", thread_setting)
                       : omp_num_threads_env() > 0 ? fmt::format("{} from OMP_NUM_THREADS", ceiling)
                                                   : fmt::format("automatic: {}, one per usable core", ceiling);
  std::string cores =
      fmt::format("{} usable core{} ({} online, {} in the affinity mask{})", b.usable, b.usable == 1 ? "" : "s",
                  b.online, b.affinity,
                  b.quota > 0 ? fmt::format(", cgroup CPU quota {} core{}", b.quota, b.quota == 1 ? "" : "s")
                              : std::string(", no cgroup CPU quota"));
  int free = core::free_cores();
  std::string text = fmt::format(
      "threads: ceiling {}; {}; {} free of other processes now. An op runs on min(ceiling, free cores) threads when "
      "its work is large enough to pay for the hand-off, else on the calling thread; waiting threads spin only while "
      "the cores they need are free. Results do not depend on the thread count.",
      source, cores, free);
  if (ceiling > b.usable)
    text += fmt::format(" The ceiling {} exceeds the {} usable core{}: at most {} run at once.", ceiling, b.usable,
                        b.usable == 1 ? "" : "s", b.usable);
  text += fmt::format("\nvector level: {}{}", cpu_isa(),
                      core::isa_capped()
                          ? fmt::format(" (TANDEM_MAX_ISA caps this CPU's {})", core::isa_name(core::host_isa()))
                          : std::string(", this CPU's own"));
  return text;
}

std::string cpu_isa() { return std::string(core::isa_name(core::isa())); }

}  // namespace tandem
