#pragma once
// Collectives among the replicas of one training job, called by every replica (SPMD, as NCCL
// and MPI are): each replica passes its own buffer and gets the same result. A replica that
// fails calls abort(), and every replica waiting in a collective gets a tandem::Error naming it
// instead of hanging; a replica that never arrives is reported after the timeout.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem::distribute {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  // data (n floats) becomes the elementwise sum over replicas, identical bits on every replica
  // (the sum runs in replica order whoever computes it).
  virtual void all_reduce_sum(int rank, float* data, int64_t n) = 0;
  virtual void all_reduce_sum(int rank, double* data, int64_t n) = 0;
  // The same over several buffers as one collective, as if they lay back to back (every replica
  // passes buffers of the same sizes). This default packs them into one; in-process reduces in place.
  virtual void all_reduce_sum(int rank, std::span<const std::span<float>> buffers) {
    std::vector<float> packed;
    for (std::span<float> b : buffers) packed.insert(packed.end(), b.begin(), b.end());
    all_reduce_sum(rank, packed.data(), static_cast<int64_t>(packed.size()));
    size_t at = 0;
    for (std::span<float> b : buffers) {
      std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(at), b.size(), b.begin());
      at += b.size();
    }
  }
  // recv (size() × n values) gets every replica's n values of send, in replica order.
  virtual void all_gather(int rank, const float* send, int64_t n, float* recv) = 0;
  virtual void all_gather(int rank, const double* send, int64_t n, double* recv) = 0;
  // data (n floats on `root`) is copied to every replica.
  virtual void broadcast(int rank, float* data, int64_t n, int root) = 0;
  virtual void barrier(int rank) = 0;
  // Makes every current and future collective throw, with `reason`.
  virtual void abort(int rank, const std::string& reason) = 0;
};

// What tf.distribute calls the cross-device ops: the pluggable reduction under a strategy.
using CrossDeviceOps = Communicator;

// Replicas as threads of this process: shared memory; in an all-reduce each thread sums its own
// slice of every replica's buffer and writes the sum into all of them (no single thread sums
// everything).
std::unique_ptr<Communicator> make_in_process_communicator(int replicas,
                                                           std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace tandem::distribute
