#pragma once
// Between the MPI communicator (mpi.cpp), the process's world (mpi_world.cpp) and the
// rank-ordered sum (mpi_ordered_sum.cpp), in builds with MPI.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/control_plane.h"
#include "tandem/collectives/communicator.h"

namespace tandem::distribute::detail {

// A communicator over `comm` (freed with it); `world`: MPI_COMM_WORLD's duplicate, whose
// collectives the control plane counts and which leaves the control plane when destroyed.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::shared_ptr<ControlPlane> control, bool world);

// Throws tandem::Error naming `what` and MPI's message unless `code` is MPI_SUCCESS.
void check_mpi(int code, const char* what);

// The sum over `comm`'s ranks of every rank's `count` values, each element's taken in rank order
// ((x0 + x1) + x2 ...) whatever the buffer holds: rank b sums block b of the buffer from every
// rank's copy (all-to-all), then the sums are gathered. So packing tensors into one buffer
// (fusion), or cutting it anywhere, changes no bit. Each rank sends 2(n-1)/n of the buffer, as a
// ring does. With compression, the values and the sums travel as 16-bit codes (sums taken in
// float32). One per communicator: it keeps its buffers from call to call; one call at a time.
class OrderedSum {
 public:
  void run(MPI_Comm comm, float* data, int64_t count, Compression wire);
  void run(MPI_Comm comm, double* data, int64_t count);

 private:
  template <class T>
  void piece(MPI_Comm comm, T* data, int64_t count, Compression wire);
  std::vector<char> scratch_;                       // every rank's block, then the 16-bit codes
  std::vector<float> decoded_;                      // a block decoded
  std::vector<int> at_, len_, mine_at_, mine_len_;  // counts and displacements
};

}  // namespace tandem::distribute::detail
