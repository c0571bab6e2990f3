#pragma once
// The MPI benchmarks' timer: a collective call's time as the slowest rank saw it, the ranks
// starting together after a barrier.
#include <mpi.h>

#include <chrono>

template <class F>
double slowest_rank_seconds(F&& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto start = std::chrono::steady_clock::now();
  call();
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}
