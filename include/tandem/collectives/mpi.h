#pragma once
// The communicator over MPI (Open MPI from Debian): one process per rank, on one machine or many,
// started by an MPI launcher (`tandem launch`, mpirun, a scheduler's srun).
//
// Collectives run on a communication thread of their own (this Open MPI has no asynchronous
// progress: an asynchronous all-reduce advances there while backward runs); each is preceded by
// a small exchange of what every rank passes, so that ranks calling different collectives or
// passing different sizes fail at once, naming both ranks and both values, instead of hanging.
// Point to point messages carry a header (count and type) that the receiver checks.
//
// Failures. Beside MPI, the ranks keep a control connection to rank 0 (TCP, to rank 0's
// addresses; loopback on one machine) and beat on it. A rank whose connection closes (it died),
// or that has not beaten within the timeout (stopped), or that aborts (an error of its own, a
// collective that timed out) is reported to every rank: options.on_failure runs with a message
// naming the rank and its host (the CLI prints it and exits), and operations waiting on the
// communication thread throw an Error with it. A collective that does not complete within the
// timeout names the ranks that have not entered it (from their beats: a rank that is alive but
// stuck elsewhere). A synchronous collective runs on its caller's thread when the communication
// thread is idle; blocked inside MPI, that caller cannot be woken: a second after the job fails
// the process prints the message and ends the job (MPI_Abort), so that nothing hangs.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "tandem/collectives/communicator.h"

namespace tandem::distribute {

struct MpiOptions {
  // The longest a collective, a receive, or a silent peer may keep a rank waiting.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // Runs once, on the control thread, with the message when the job fails (any rank).
  std::function<void(const std::string& message)> on_failure;
  // Ranks on several machines are refused unless this (or TANDEM_INSECURE=1) says the network is
  // trusted: rank 0's control port then listens on every interface, and MPI's traffic is plain.
  bool insecure = false;
};

// Whether this build has MPI, and whether an MPI launcher started this process (its environment
// names a world: Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, Slurm's PMI_SIZE).
bool mpi_built();
bool started_by_mpi_launcher();

// This process's handle on every rank of the launch (MPI_COMM_WORLD), made once per process:
// initializes MPI (MPI_THREAD_MULTIPLE) and the control connections; collective over the ranks.
// Ranks that do not all arrive within the timeout fail, naming the ones missing.
std::unique_ptr<Communicator> make_mpi_world_communicator(const MpiOptions& options = {});

// The host of a rank of the world (its MPI processor name); "" before the world is made.
std::string mpi_host_of(int rank);

// After this rank's own failure is printed, before it exits: waits (at most 2 s, or the timeout if
// shorter) until the other ranks have ended, so that each prints its own words before the
// launcher ends them all. Returns at once when the job has not failed here first (another rank's
// failure, relayed) or there is no world.
void linger_after_failure();

}  // namespace tandem::distribute
