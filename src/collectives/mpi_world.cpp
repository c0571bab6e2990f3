// The process's MPI world (tandem/collectives/mpi.h): MPI started once (MPI_THREAD_MULTIPLE), the
// ranks' host names, the control plane, and MPI's end at exit when no rank has failed. Without
// MPI in the build, the stubs that say so.
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/collectives/mpi.h"
#include "tandem/error.h"

#ifdef TANDEM_WITH_MPI
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

#else

namespace {

using detail::check_mpi;
using detail::ControlPlane;

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

}  // namespace

std::unique_ptr<Communicator> make_mpi_world_communicator(const MpiOptions& options) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (w.made) fail("MPI: the world communicator is made once per process (MPI cannot start again)");
  if (options.timeout.count() <= 0) fail("MPI: the timeout must be positive, not {} ms", options.timeout.count());
  int provided = 0, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  else MPI_Query_thread(&provided);
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
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  check_mpi(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                          MPI_COMM_WORLD),
            "MPI_Allgather");
  for (int r = 0; r < size; ++r) w.hosts.emplace_back(names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  auto exchange = [](std::string& text) {
    std::vector<char> buffer(4096, '\0');
    std::copy_n(text.begin(), std::min(text.size(), buffer.size() - 1), buffer.begin());
    check_mpi(MPI_Bcast(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
    text = buffer.data();
  };
  w.control = std::make_shared<ControlPlane>(rank, w.hosts, options.timeout, options.on_failure, exchange);
  MPI_Comm comm;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  static bool finalize_registered = [] {
    std::atexit([] {
      World& w = world();
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized == 0 && w.control && !w.control->failed()) MPI_Finalize();
    });
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

#endif

}  // namespace tandem::distribute
