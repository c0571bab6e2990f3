// The in-process communicator. Each collective is phases separated by a barrier: publish the
// buffer pointers; each replica reduces its slice from all buffers in replica order (into a
// scratch slice, since the others still read the inputs); then copies every reduced slice
// into its own buffer.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "tandem/distribute/communicator.h"
#include "tandem/error.h"

namespace tandem::distribute {
namespace {

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(int replicas, std::chrono::milliseconds timeout)
      : size_(replicas), timeout_(timeout), buffers_(static_cast<size_t>(replicas)), sizes_(static_cast<size_t>(replicas)),
        scratch_(static_cast<size_t>(replicas)) {
    if (replicas < 1) fail("communicator: replicas must be at least 1, got {}", replicas);
  }

  int size() const override { return size_; }

  void all_reduce_sum(int rank, float* data, int64_t n) override {
    check_rank(rank);
    if (size_ == 1) return;
    publish(rank, data, n, "all_reduce_sum");
    // Slice r of the buffer belongs to replica r.
    int64_t per = (n + size_ - 1) / size_;
    int64_t begin = std::min<int64_t>(n, per * rank), end = std::min<int64_t>(n, begin + per);
    std::vector<float>& mine = scratch_[static_cast<size_t>(rank)];
    mine.resize(static_cast<size_t>(end - begin));
    const float* first = buffers_[0];
    std::copy(first + begin, first + end, mine.begin());
    for (int r = 1; r < size_; ++r) {
      const float* other = buffers_[static_cast<size_t>(r)];
      float* out = mine.data();
      for (int64_t i = begin; i < end; ++i) out[i - begin] += other[i];
    }
    wait(rank, "all_reduce_sum (reduce-scatter)");
    for (int r = 0; r < size_; ++r) {
      int64_t b = std::min<int64_t>(n, per * r), e = std::min<int64_t>(n, b + per);
      std::copy(scratch_[static_cast<size_t>(r)].begin(), scratch_[static_cast<size_t>(r)].begin() + (e - b), data + b);
    }
    wait(rank, "all_reduce_sum (all-gather)");
  }

  void broadcast(int rank, float* data, int64_t n, int root) override {
    check_rank(rank);
    if (root < 0 || root >= size_) fail("broadcast: root {} out of range [0, {})", root, size_);
    if (size_ == 1) return;
    publish(rank, data, n, "broadcast");
    if (rank != root) std::copy(buffers_[static_cast<size_t>(root)], buffers_[static_cast<size_t>(root)] + n, data);
    wait(rank, "broadcast");
  }

  void barrier(int rank) override {
    check_rank(rank);
    wait(rank, "barrier");
  }

  void abort(int rank, const std::string& reason) override {
    std::lock_guard lock(mutex_);
    if (aborted_.empty()) aborted_ = fmt::format("replica {} failed: {}", rank, reason);
    changed_.notify_all();
  }

 private:
  void check_rank(int rank) const {
    if (rank < 0 || rank >= size_) fail("communicator: rank {} out of range [0, {})", rank, size_);
  }

  // Every replica states its buffer and size; they must agree (Horovod-style check, both sides named).
  void publish(int rank, float* data, int64_t n, const char* op) {
    buffers_[static_cast<size_t>(rank)] = data;
    sizes_[static_cast<size_t>(rank)] = n;
    wait(rank, op);
    for (int r = 0; r < size_; ++r)
      if (sizes_[static_cast<size_t>(r)] != n)
        fail("{}: mismatched sizes: replica {} passed {} floats, but replica {} passed {}", op, rank, n, r,
             sizes_[static_cast<size_t>(r)]);
  }

  // A generation barrier that gives up on abort or timeout.
  void wait(int rank, const char* op) {
    std::unique_lock lock(mutex_);
    if (!aborted_.empty()) fail("{}: {}", op, aborted_);
    uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    bool done = changed_.wait_for(lock, timeout_, [&] { return generation_ != generation || !aborted_.empty(); });
    if (generation_ != generation) return;
    if (!aborted_.empty()) fail("{}: {}", op, aborted_);
    (void)done;
    aborted_ = fmt::format("replica {} waited {} ms in {} for the others; {} of {} arrived", rank, timeout_.count(), op,
                           arrived_, size_);
    changed_.notify_all();
    fail("{}: timed out: {}", op, aborted_);
  }

  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<float*> buffers_;
  std::vector<int64_t> sizes_;
  std::vector<std::vector<float>> scratch_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string aborted_;
};

}  // namespace

std::unique_ptr<Communicator> make_in_process_communicator(int replicas, std::chrono::milliseconds timeout) {
  return std::make_unique<InProcessCommunicator>(replicas, timeout);
}

}  // namespace tandem::distribute
