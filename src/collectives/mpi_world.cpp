// The process's MPI world (tandem/collectives/mpi.h): MPI started once (MPI_THREAD_MULTIPLE), the
// ranks' host names, the control plane, and MPI's end at exit when no rank has failed. MPI's own
// start and end wait on every rank with no timeout: both run under a watchdog, and the end only
// after every rank has said on the control plane that it is ending (end_mpi). Without MPI in the
// build, the stubs that say so.
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tandem/collectives/mpi.h"
#include "tandem/error.h"

#ifdef TANDEM_WITH_MPI
#include <fmt/ranges.h>

#include <algorithm>
#include <initializer_list>

#include "collectives/control_plane.h"
#include "collectives/mpi_communicator.h"
#endif

namespace tandem::distribute {

bool mpi_built() {
#ifdef TANDEM_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

#ifndef TANDEM_WITH_MPI

std::unique_ptr<Communicator> make_mpi_world_communicator(const MpiOptions&) {
  fail("MPI: this Tandem was built without MPI (install libopenmpi-dev and build again)");
}
std::string mpi_host_of(int) { return ""; }
void linger_after_failure() {}

#else

namespace {

using detail::check_mpi;
using detail::ControlPlane;

[[noreturn]] void end_process(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  _exit(1);
}

// Ends the process with its message (exit status 1) unless destroyed within `limit`: for the MPI
// calls that wait on other ranks and have no timeout of their own (MPI_Init, MPI_Finalize).
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::function<std::string()> message)
      : thread_([this, limit, message = std::move(message)] {
          std::unique_lock lock(mutex_);
          if (!changed_.wait_for(lock, limit, [this] { return done_; })) end_process(message());
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

// The first of `names` set (mpirun's, PMIx's, then srun's own), or `fallback`.
int launcher_env(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names)
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return fallback;
}

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// Before the control plane no rank knows which other one failed: the candidates ("rank 1", "one
// of ranks 0, 2, 3").
std::string other_ranks(int rank, int size) {
  if (size == 2) return fmt::format("rank {}", 1 - rank);
  if (size > 9) return fmt::format("one of the other {} ranks", size - 1);
  std::string list;
  for (int r = 0; r < size; ++r)
    if (r != rank) list += fmt::format("{}{}", list.empty() ? "" : ", ", r);
  return "one of ranks " + list;
}

std::string waiting_at_start(int rank, int size, const std::string& what, std::chrono::milliseconds limit) {
  return fmt::format(
      "rank {} (host {}) waited {} s in {} during start-up: {} has not come to it (it died, is stopped, or was not "
      "started); the job ends",
      rank, this_host(), static_cast<double>(limit.count()) / 1000.0, what, other_ranks(rank, size));
}

// A rank the launcher ends (SIGTERM) before the control plane is up says what it was doing:
// the launcher names the rank that failed, not the phase. Written before the handler is set.
char ended_at_start[256];

void say_when_ended_at_start(int) {
  ssize_t n = write(2, ended_at_start, std::strlen(ended_at_start));
  (void)n;
  signal(SIGTERM, SIG_DFL);
  raise(SIGTERM);
}

// Process-wide: MPI is initialized once, and finalized at exit when no rank has failed.
struct World {
  std::mutex mutex;
  bool made = false;
  std::vector<std::string> hosts;
  std::shared_ptr<ControlPlane> control;
};
World& world() {
  static World w;
  return w;
}

// At exit. MPI_Finalize waits for every rank: first every rank says on the control plane that it
// is ending (a rank that dies or stops before it does is named, with its phase, within the
// timeout); then MPI ends under a watchdog, for a rank stopped between the two; then the ranks
// stay watched until each is out of MPI (ControlPlane::finish_and_wait).
void end_mpi() {
  World& w = world();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0 || !w.control) return;
  if (w.control->failed()) end_process(w.control->failure());
  w.control->set_phase("shutdown");
  if (!w.control->leave_and_wait()) end_process(w.control->failure());
  {
    Watchdog end(w.control->timeout(), [&] {
      return fmt::format(
          "{} waited {} s in MPI's end (MPI_Finalize) during shutdown, after every rank had come to it: a rank has "
          "stopped since; the job ends",
          w.control->who(w.control->rank()), static_cast<double>(w.control->timeout().count()) / 1000.0);
    });
    MPI_Finalize();
  }
  // Out of MPI, a stopped rank still holds the launcher, which waits for every process to exit.
  if (!w.control->finish_and_wait()) end_process(w.control->failure());
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_world_communicator(const MpiOptions& options) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (w.made) fail("MPI: the world communicator is made once per process (MPI cannot start again)");
  if (options.timeout.count() <= 0) fail("MPI: the timeout must be positive, not {} ms", options.timeout.count());
  // Before MPI's start: under srun --mpi=pmix only PMIx's rank is set, and the size is Slurm's.
  int launched_rank = launcher_env({"OMPI_COMM_WORLD_RANK", "PMIX_RANK"}, 0);
  int launched_size = launcher_env({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}, 1);
  if (int signal = detail::test_fault_signal(launched_rank, "start-up")) raise(signal);
  std::snprintf(ended_at_start, sizeof ended_at_start,
                "error: rank %d (host %s) was ended by the launcher during start-up: %s failed to start (it died or "
                "is stopped), or this one was stopped\n",
                launched_rank, this_host().c_str(), other_ranks(launched_rank, launched_size).c_str());
  auto previous_term = signal(SIGTERM, say_when_ended_at_start);
  int provided = 0, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) {
    Watchdog start(options.timeout, [&] {
      return waiting_at_start(launched_rank, launched_size, "MPI's start (MPI_Init)", options.timeout);
    });
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  } else {
    MPI_Query_thread(&provided);
  }
  if (int signal = detail::test_fault_signal(launched_rank, "connecting")) raise(signal);
  if (provided < MPI_THREAD_MULTIPLE)
    fail("MPI: this MPI library gives thread level {}, and Tandem needs MPI_THREAD_MULTIPLE ({})", provided,
         MPI_THREAD_MULTIPLE);
  w.made = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  // The host names and rank 0's port go over MPI, which cannot time out.
  Watchdog connecting(options.timeout, [&] {
    return waiting_at_start(rank, size, "the exchange of host names and rank 0's port (MPI_Allgather, MPI_Bcast)",
                            options.timeout);
  });
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  check_mpi(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                          MPI_COMM_WORLD),
            "MPI_Allgather");
  for (int r = 0; r < size; ++r) w.hosts.emplace_back(names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  // Across machines (every rank decides alike, from the same names).
  if (const char* env = std::getenv("TANDEM_INSECURE"); detail::listen_address(w.hosts, false).empty() &&
                                                        !options.insecure &&
                                                        (env == nullptr || std::string(env) != "1")) {
    std::vector<std::string> machines = w.hosts;
    std::sort(machines.begin(), machines.end());
    machines.erase(std::unique(machines.begin(), machines.end()), machines.end());
    fail(
        "MPI: the ranks are on {} machines ({}): rank 0's control port would listen on every interface, and MPI's "
        "own traffic is neither authenticated nor encrypted; on a network you trust, pass --insecure (tandem fit) or "
        "set TANDEM_INSECURE=1",
        machines.size(), fmt::join(machines, ", "));
  }
  auto exchange = [](std::string& text, const std::function<void()>&) {  // MPI_Bcast: every rank at once
    std::vector<char> buffer(4096, '\0');
    std::copy_n(text.begin(), std::min(text.size(), buffer.size() - 1), buffer.begin());
    check_mpi(MPI_Bcast(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
    text = buffer.data();
  };
  w.control = std::make_shared<ControlPlane>(rank, w.hosts, options.timeout, options.on_failure, exchange);
  w.control->set_phase("running");  // until the program names its phases
  MPI_Comm comm;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  signal(SIGTERM, previous_term);
  static bool finalize_registered = [] {
    std::atexit(end_mpi);
    return true;
  }();
  (void)finalize_registered;
  return detail::make_mpi_communicator(comm, w.control, true);
}

std::string mpi_host_of(int rank) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  return rank >= 0 && rank < static_cast<int>(w.hosts.size()) ? w.hosts[static_cast<size_t>(rank)] : "";
}

void linger_after_failure() {
  std::shared_ptr<ControlPlane> control;
  {
    World& w = world();
    std::unique_lock lock(w.mutex, std::try_to_lock);  // held through MPI's start: no world to wait on yet
    if (!lock.owns_lock()) return;
    control = w.control;
  }
  if (control) control->linger_after_own_failure(std::min(control->timeout(), std::chrono::milliseconds(2000)));
}

#endif

}  // namespace tandem::distribute
