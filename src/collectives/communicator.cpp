// What every communicator shares: the data types, the packing grouped all-reduce and the
// asynchronous forms run through the synchronous ones.
#include "tandem/collectives/communicator.h"

#include <exception>
#include <functional>
#include <utility>

#include "tandem/error.h"

namespace tandem::distribute {
namespace {

// An operation already run: wait() rethrows what it threw.
class Finished : public Work {
 public:
  explicit Finished(const std::function<void()>& run) {
    try {
      run();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  void wait() override {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  bool done() const override { return true; }

 private:
  std::exception_ptr error_;
};

// An operation run by the first wait() (a receive, which must not block the caller before it).
class Deferred : public Work {
 public:
  explicit Deferred(std::function<void()> run) : run_(std::move(run)) {}
  void wait() override {
    if (run_) std::exchange(run_, nullptr)();
  }
  bool done() const override { return !run_; }

 private:
  std::function<void()> run_;
};

}  // namespace

size_t data_type_size(DataType dtype) { return dtype == DataType::Float32 ? 4 : 8; }

const char* data_type_name(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Int64: return "int64";
  }
  return "unknown";
}

void Communicator::all_reduce(std::span<const std::span<float>> buffers, ReduceOp op) {
  std::vector<float> packed;
  for (std::span<float> b : buffers) packed.insert(packed.end(), b.begin(), b.end());
  all_reduce(packed.data(), static_cast<int64_t>(packed.size()), DataType::Float32, op);
  size_t at = 0;
  for (std::span<float> b : buffers) {
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(at), b.size(), b.begin());
    at += b.size();
  }
}

std::unique_ptr<Work> Communicator::all_reduce_async(void* data, int64_t count, DataType dtype, ReduceOp op) {
  return std::make_unique<Finished>([&] { all_reduce(data, count, dtype, op); });
}
std::unique_ptr<Work> Communicator::reduce_scatter_async(const void* send, void* recv, int64_t recv_count,
                                                         DataType dtype, ReduceOp op) {
  return std::make_unique<Finished>([&] { reduce_scatter(send, recv, recv_count, dtype, op); });
}
std::unique_ptr<Work> Communicator::all_gather_async(const void* send, int64_t count, void* recv, DataType dtype) {
  return std::make_unique<Finished>([&] { all_gather(send, count, recv, dtype); });
}
std::unique_ptr<Work> Communicator::broadcast_async(void* data, int64_t count, DataType dtype, int root) {
  return std::make_unique<Finished>([&] { broadcast(data, count, dtype, root); });
}
std::unique_ptr<Work> Communicator::send_async(const void* data, int64_t count, DataType dtype, int peer, int tag) {
  return std::make_unique<Finished>([&] { send(data, count, dtype, peer, tag); });
}
std::unique_ptr<Work> Communicator::recv_async(void* data, int64_t count, DataType dtype, int peer, int tag) {
  return std::make_unique<Deferred>([=, this] { recv(data, count, dtype, peer, tag); });
}
std::unique_ptr<Work> Communicator::barrier_async() {
  return std::make_unique<Finished>([&] { barrier(); });
}

}  // namespace tandem::distribute
