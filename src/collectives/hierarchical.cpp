// Replicas in several processes (make_hierarchical_communicators): each collective runs among
// the replicas of this process (in-process), then among the processes (the workers' group,
// called by local replica 0 only), then back to the local replicas.
#include <algorithm>
#include <cstring>
#include <vector>

#include "tandem/collectives/communicator.h"
#include "tandem/error.h"

namespace tandem::distribute {
namespace {

class Hierarchical : public Communicator {
 public:
  Hierarchical(std::shared_ptr<Communicator> workers, std::unique_ptr<Communicator> local)
      : workers_(std::move(workers)), local_(std::move(local)) {}
  int rank() const override { return workers_->rank() * local_->size() + local_->rank(); }
  int size() const override { return workers_->size() * local_->size(); }
  int local_rank() const override { return workers_->local_rank() * local_->size() + local_->rank(); }
  int local_size() const override { return workers_->local_size() * local_->size(); }
  // One process's replicas go through the workers' group in order, synchronously.
  bool runs_in_background() const override { return local_->size() == 1 && workers_->runs_in_background(); }
  std::unique_ptr<Work> all_reduce_async(void* data, int64_t count, DataType dtype, ReduceOp op) override {
    if (local_->size() == 1) return workers_->all_reduce_async(data, count, dtype, op);
    return Communicator::all_reduce_async(data, count, dtype, op);
  }
  void set_timeline(Timeline* timeline) override { workers_->set_timeline(timeline); }
  void all_reduce_compressed(float* data, int64_t count, ReduceOp op, Compression wire) override {
    if (local_->size() == 1) return workers_->all_reduce_compressed(data, count, op, wire);
    Communicator::all_reduce_compressed(data, count, op, wire);
  }
  std::unique_ptr<Work> all_reduce_compressed_async(float* data, int64_t count, ReduceOp op,
                                                    Compression wire) override {
    if (local_->size() == 1) return workers_->all_reduce_compressed_async(data, count, op, wire);
    return Communicator::all_reduce_compressed_async(data, count, op, wire);
  }

  void all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) override {
    if (local_->size() == 1) return workers_->all_reduce(data, count, dtype, op);
    if (dtype == DataType::Int64 && op == ReduceOp::Mean) fail("all_reduce: the mean of int64 values is not defined");
    ReduceOp step = op == ReduceOp::Mean ? ReduceOp::Sum : op;
    local_->all_reduce(data, count, dtype, step);
    if (leader()) {
      workers_->all_reduce(data, count, dtype, step);
      if (op == ReduceOp::Mean) divide(data, count, dtype);
    }
    local_->broadcast(data, count, dtype, 0);
  }
  void all_reduce(std::span<const std::span<float>> buffers, ReduceOp op) override {
    if (local_->size() == 1) return workers_->all_reduce(buffers, op);
    Communicator::all_reduce(buffers, op);
  }
  void reduce_scatter(const void* send, void* recv, int64_t recv_count, DataType dtype, ReduceOp op) override {
    size_t bytes = data_type_size(dtype);
    std::vector<char> all(static_cast<size_t>(recv_count * size()) * bytes);
    std::memcpy(all.data(), send, all.size());
    all_reduce(all.data(), recv_count * size(), dtype, op);
    std::memcpy(recv, all.data() + static_cast<size_t>(recv_count * rank()) * bytes,
                static_cast<size_t>(recv_count) * bytes);
  }
  void all_gather(const void* send, int64_t count, void* recv, DataType dtype) override {
    if (local_->size() == 1) return workers_->all_gather(send, count, recv, dtype);
    size_t bytes = data_type_size(dtype),
           block = static_cast<size_t>(count) * bytes * static_cast<size_t>(local_->size());
    std::vector<char> mine(block);
    local_->all_gather(send, count, mine.data(), dtype);  // this process's replicas, in order
    if (leader()) workers_->all_gather(mine.data(), count * local_->size(), recv, dtype);
    local_->broadcast(recv, count * size(), dtype, 0);
  }
  void broadcast(void* data, int64_t count, DataType dtype, int root) override {
    if (root < 0 || root >= size()) fail("broadcast: root {} is not a rank of this group (0 to {})", root, size() - 1);
    int root_worker = root / local_->size();
    if (workers_->rank() == root_worker) local_->broadcast(data, count, dtype, root % local_->size());
    if (leader()) workers_->broadcast(data, count, dtype, root_worker);
    if (workers_->rank() != root_worker) local_->broadcast(data, count, dtype, 0);
  }
  bool sends_to_every_rank() const override { return workers_->size() == 1; }
  bool shares_memory() const override { return workers_->size() == 1 && local_->shares_memory(); }
  void send(const void* data, int64_t count, DataType dtype, int peer, int tag) override {
    local_->send(data, count, dtype, local_peer(peer, "send"), tag);
  }
  void recv(void* data, int64_t count, DataType dtype, int peer, int tag) override {
    local_->recv(data, count, dtype, local_peer(peer, "recv"), tag);
  }
  void barrier() override {
    local_->barrier();
    if (leader()) workers_->barrier();
    local_->barrier();
  }
  std::unique_ptr<Communicator> split(int, int) override {
    fail("split: not available on a group of replicas over several processes (split the workers' group instead)");
  }
  void abort(const std::string& reason) override {
    local_->abort(reason);
    workers_->abort(reason);
  }

 private:
  bool leader() const { return local_->rank() == 0; }
  int local_peer(int peer, const char* what) const {
    int first = workers_->rank() * local_->size();
    if (peer < first || peer >= first + local_->size() || peer == rank())
      fail(
          "{}: peer {} is not another replica of this process (ranks {} to {}): point to point messages between "
          "replicas of different processes go through the workers' group",
          what, peer, first, first + local_->size() - 1);
    return peer - first;
  }
  void divide(void* data, int64_t count, DataType dtype) const {
    auto n = static_cast<double>(size());
    if (dtype == DataType::Float32)
      for (float* p = static_cast<float*>(data); count-- > 0; ++p) *p = static_cast<float>(*p / n);
    else if (dtype == DataType::Float64)
      for (double* p = static_cast<double*>(data); count-- > 0; ++p) *p /= n;
  }
  std::shared_ptr<Communicator> workers_;
  std::unique_ptr<Communicator> local_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_hierarchical_communicators(std::shared_ptr<Communicator> workers,
                                                                           int local,
                                                                           std::chrono::milliseconds timeout) {
  if (!workers) fail("make_hierarchical_communicators: no workers' group");
  if (local < 1) fail("make_hierarchical_communicators: {} local replicas; at least 1", local);
  std::vector<std::unique_ptr<Communicator>> out;
  for (auto& l : make_in_process_communicators(local, timeout))
    out.push_back(std::make_unique<Hierarchical>(workers, std::move(l)));
  return out;
}

}  // namespace tandem::distribute
