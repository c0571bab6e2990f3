#pragma once
// The two halves of tandem_mpi_check (see mpi_check.cpp): the checks' shared failure count, and
// the training scenarios of mpi_check_training.cpp that main runs.
#include <cstdio>
#include <memory>
#include <string>

#include "tandem/collectives/communicator.h"

namespace tandem::mpi_check {

inline int failures = 0;
inline void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank check failed: %s\n", what.c_str());
    ++failures;
  }
}

// MultiWorkerMirroredStrategy fit on `rows` rows (the workers' data may differ: an error names them).
void train_uneven(std::shared_ptr<distribute::Communicator> world, int64_t rows);
// "rank R: weights match" / "fused bits match": the strategy against one process on the same global batches.
void train_and_compare(std::shared_ptr<distribute::Communicator> world, int local, const std::string& mode);
// "rank R: custom loop matches".
void custom_loop_matches(std::shared_ptr<distribute::Communicator> world, int local);
// "rank R: hvd matches the strategy".
void hvd_scenario(std::shared_ptr<distribute::Communicator> world);

}  // namespace tandem::mpi_check
