#pragma once
// Between the MPI communicator (mpi.cpp) and the process's world (mpi_world.cpp), in builds with MPI.
#include <mpi.h>

#include <memory>

#include "collectives/control_plane.h"
#include "tandem/collectives/communicator.h"

namespace tandem::distribute::detail {

// A communicator over `comm` (freed with it); `world`: MPI_COMM_WORLD's duplicate, whose
// collectives the control plane counts and which leaves the control plane when destroyed.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::shared_ptr<ControlPlane> control, bool world);

// Throws tandem::Error naming `what` and MPI's message unless `code` is MPI_SUCCESS.
void check_mpi(int code, const char* what);

}  // namespace tandem::distribute::detail
