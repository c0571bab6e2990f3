#pragma once
// Collectives among the ranks of one training job (MPI's and NCCL's model). A Communicator is one
// rank's handle on its group: it knows its rank() among size() ranks, and its local_rank() among
// the local_size() ranks of its machine. Every rank of the group calls each collective, in the
// same order, with buffers of the same sizes (checked where the implementation can: both sides
// are named); each gets the same result, bit for bit.
//
// Failure and time. A rank that fails calls abort(reason): every rank of the group waiting in a
// collective or a recv, or entering one later, gets a tandem::Error naming the failed rank and the
// reason, instead of hanging. A rank that does not arrive within the group's timeout makes the
// ranks waiting for it fail with an Error naming the operation, the timeout and how many ranks
// arrived; the group is then aborted. An implementation whose ranks live in other processes or on
// other machines keeps the same promises: a peer that dies (its connection closes, it stops
// answering) is an abort naming that peer, and no wait is longer than the timeout. A group made by
// split() is a group of its own: aborting it leaves its parent's other groups alone.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem {
class Timeline;
}

namespace tandem::distribute {

enum class DataType { Float32, Float64, Int64 };
enum class ReduceOp { Sum, Mean, Min, Max };  // Mean: the sum ÷ size(); not for Int64

// How float32 values travel in a compressed all-reduce (Horovod's Compression): as they are, or as
// 16-bit floats (IEEE half: 11 significant bits, up to 65504; bfloat16: 8 bits, float32's range).
enum class Compression { None, Float16, BFloat16 };
const char* compression_name(Compression wire);  // "none", "fp16", "bf16"
// n values rounded to the nearest `wire` value (ties to even; beyond fp16's range: ±inf), in
// place; what a value is after a trip over the wire.
void round_to_wire(float* data, int64_t n, Compression wire);
// Their 16-bit codes and back: to_wire writes n codes, from_wire n floats.
void to_wire(const float* data, int64_t n, Compression wire, uint16_t* codes);
void from_wire(const uint16_t* codes, int64_t n, Compression wire, float* data);

template <class T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<float>() {
  return DataType::Float32;
}
template <>
constexpr DataType data_type_of<double>() {
  return DataType::Float64;
}
template <>
constexpr DataType data_type_of<int64_t>() {
  return DataType::Int64;
}
size_t data_type_size(DataType dtype);
const char* data_type_name(DataType dtype);

// The handle of an asynchronous operation: wait() returns once it is complete (its output
// buffers written, its input buffers free to reuse) and rethrows its error.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool done() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  // data (count values) becomes their reduction over the ranks, the same bits on every rank
  // (a sum runs in rank order whoever computes it).
  virtual void all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) = 0;
  // Several float buffers reduced as one collective, as if back to back (every rank passes
  // buffers of the same sizes). This default packs them; in-process reduces them in place.
  virtual void all_reduce(std::span<const std::span<float>> buffers, ReduceOp op);
  // send holds size() blocks of recv_count values; recv gets the reduction of block rank().
  virtual void reduce_scatter(const void* send, void* recv, int64_t recv_count, DataType dtype, ReduceOp op) = 0;
  // recv (size() × count values) gets every rank's count values of send, in rank order.
  virtual void all_gather(const void* send, int64_t count, void* recv, DataType dtype) = 0;
  // data (count values on `root`) is copied to every rank.
  virtual void broadcast(void* data, int64_t count, DataType dtype, int root) = 0;
  // Point to point: messages from one rank to another with one tag arrive in the order sent;
  // recv names the count and dtype it expects, and a message of another is an error naming both.
  virtual void send(const void* data, int64_t count, DataType dtype, int peer, int tag = 0) = 0;
  virtual void recv(void* data, int64_t count, DataType dtype, int peer, int tag = 0) = 0;
  virtual void barrier() = 0;
  // Collective: the ranks passing the same color form a new group, ranked by (key, rank).
  // A negative color joins no group (returns null).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Makes every current and future operation of the group throw, naming this rank and `reason`.
  virtual void abort(const std::string& reason) = 0;

  // Whether the asynchronous forms run in the background (a thread of the communicator's), so
  // that work submitted early overlaps the caller's; else they cost what the synchronous ones do.
  virtual bool runs_in_background() const { return false; }
  // Whether send and recv reach every rank of the group (a group of replicas over several
  // processes passes messages within a process only).
  virtual bool sends_to_every_rank() const { return true; }
  // Whether every rank runs in this process (threads of one address space), so that a rank may
  // read memory another rank published (through a collective) until they next synchronize.
  virtual bool shares_memory() const { return false; }
  // The phase of the job this process is in ("training", "checkpoint writing", ...): said to the
  // other processes, so that a failure names it; returns the phase before. Only communicators
  // across processes keep it.
  virtual std::string set_phase(const std::string& phase) {
    (void)phase;
    return "";
  }
  // Where the communicator records its collectives' spans (null: nowhere); the timeline must
  // outlive its use. Communicators that talk to other processes record (MPI); the in-process one
  // records its all-reduces and gathers once given one (a model-parallel strategy's devices).
  virtual void set_timeline(Timeline* timeline) { (void)timeline; }

  // float32 values summed (or averaged) with `wire` on the wire: each rank's values and the
  // results are rounded to that format, the sums taken in float32 in rank order. This default
  // rounds and runs all_reduce; the MPI communicator sends the 16-bit codes (half the bytes).
  virtual std::unique_ptr<Work> all_reduce_compressed_async(float* data, int64_t count, ReduceOp op, Compression wire);
  virtual void all_reduce_compressed(float* data, int64_t count, ReduceOp op, Compression wire) {
    all_reduce_compressed_async(data, count, op, wire)->wait();
  }

  // Asynchronous forms. These defaults run the operation before returning (what an in-process
  // group may do), except recv, which waits in Work::wait(): buffers must stay alive until then.
  virtual std::unique_ptr<Work> all_reduce_async(void* data, int64_t count, DataType dtype, ReduceOp op);
  virtual std::unique_ptr<Work> reduce_scatter_async(const void* send, void* recv, int64_t recv_count, DataType dtype,
                                                     ReduceOp op);
  virtual std::unique_ptr<Work> all_gather_async(const void* send, int64_t count, void* recv, DataType dtype);
  virtual std::unique_ptr<Work> broadcast_async(void* data, int64_t count, DataType dtype, int root);
  virtual std::unique_ptr<Work> send_async(const void* data, int64_t count, DataType dtype, int peer, int tag = 0);
  virtual std::unique_ptr<Work> recv_async(void* data, int64_t count, DataType dtype, int peer, int tag = 0);
  virtual std::unique_ptr<Work> barrier_async();

  // Typed forms.
  template <class T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::Sum) {
    all_reduce(data.data(), static_cast<int64_t>(data.size()), data_type_of<T>(), op);
  }
  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    all_gather(send.data(), static_cast<int64_t>(send.size()), recv.data(), data_type_of<T>());
  }
  template <class T>
  void broadcast(std::span<T> data, int root) {
    broadcast(data.data(), static_cast<int64_t>(data.size()), data_type_of<T>(), root);
  }
};

// What tf.distribute calls the cross-device ops: the pluggable reduction under a strategy.
using CrossDeviceOps = Communicator;

// A group of `ranks` ranks as threads of this process (local_rank = rank), one handle per rank:
// handle r is rank r and must be used by one thread at a time. Shared memory: in an all-reduce
// each rank sums its own slice of every rank's buffer and writes the sum into all of them.
std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(
    int ranks, std::chrono::milliseconds timeout = std::chrono::minutes(5));

// Replicas in several processes: `local` handles over this process's replicas (threads), handle
// r being rank workers.rank() × local + r of a group of workers.size() × local, over `workers`
// (one handle per process, which only local replica 0's thread uses). A collective runs among
// the local replicas, then across the processes, then back: every process has `local` replicas.
// Sums are taken within each process first (not in rank order). Point to point messages stay
// within a process.
std::vector<std::unique_ptr<Communicator>> make_hierarchical_communicators(
    std::shared_ptr<Communicator> workers, int local, std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace tandem::distribute
