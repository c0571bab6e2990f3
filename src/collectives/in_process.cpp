// The in-process communicator: a group shared by its ranks' handles (threads of this process).
// A collective is phases separated by a barrier: publish the buffer pointers, then each rank
// works on its own part. An all-reduce is one pass: rank r reduces slice r of every buffer, in
// rank order, and writes the result into slice r of every buffer (no other rank touches slice r),
// so each element crosses between cores once; a reduce-scatter then all-gather (each rank pulling
// the others' reduced slices) measured about 4× slower on fresh gradients. No scratch memory,
// every rank busy on its own part. Point-to-point messages go through mailboxes.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/cpu_budget.h"
#include "core/vectorize.h"

#include "tandem/collectives/communicator.h"
#include "tandem/error.h"
#include "tandem/timeline.h"

namespace tandem::distribute {
namespace {

// The sum of every buffer's element i, written back into every buffer, in one pass.
TANDEM_VECTORIZE void sum_to_all_loop(float* const* buffers, int count, int64_t n) {
  if (count == 2) {
    float* a = buffers[0];
    float* b = buffers[1];
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) {
      float s = a[i] + b[i];
      a[i] = s;
      b[i] = s;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float s = buffers[0][i];
    for (int q = 1; q < count; ++q) s += buffers[q][i];
    for (int q = 0; q < count; ++q) buffers[q][i] = s;
  }
}
void sum_to_all(float* const* buffers, int count, int64_t n) {
  core::vectorized([&] { sum_to_all_loop(buffers, count, n); });
}

// Element i of the reduction of inputs[0..count)[i], in rank order.
template <class T>
T reduce_one(T* const* inputs, int count, int64_t i, ReduceOp op) {
  T s = inputs[0][i];
  for (int q = 1; q < count; ++q) {
    T v = inputs[q][i];
    if (op == ReduceOp::Min) s = std::min(s, v);
    else if (op == ReduceOp::Max) s = std::max(s, v);
    else s += v;
  }
  if (op == ReduceOp::Mean) s /= static_cast<T>(count);
  return s;
}

// The reduction of every buffer's element i, written back into every buffer, in one pass.
template <class T>
void reduce_to_all(T* const* buffers, int count, int64_t n, ReduceOp op) {
  if constexpr (std::is_same_v<T, float>)
    if (op == ReduceOp::Sum) return sum_to_all(buffers, count, n);
  for (int64_t i = 0; i < n; ++i) {
    T s = reduce_one<T>(buffers, count, i, op);
    for (int q = 0; q < count; ++q) buffers[q][i] = s;
  }
}

const char* unit(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return "floats";
    case DataType::Float64: return "doubles";
    case DataType::Int64: return "int64s";
  }
  return "values";
}

// Calls fn(T*) with data as the dtype's element type.
template <class Fn>
void with_type(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::Float32: return fn(static_cast<float*>(nullptr));
    case DataType::Float64: return fn(static_cast<double*>(nullptr));
    case DataType::Int64: return fn(static_cast<int64_t*>(nullptr));
  }
  fail("communicator: unknown data type {}", static_cast<int>(dtype));
}

// The shared state of one group; every method takes the calling rank.
class Group {
 public:
  Group(int size, std::chrono::milliseconds timeout)
      : size_(size),
        timeout_(timeout),
        buffers_(static_cast<size_t>(size)),
        sizes_(static_cast<size_t>(size)),
        dtypes_(static_cast<size_t>(size)),
        scratch_(static_cast<size_t>(size)),
        groups_(static_cast<size_t>(size)),
        splits_made_(static_cast<size_t>(size)) {
    if (size < 1) fail("communicator: replicas must be at least 1, got {}", size);
    for (Scratch& s : scratch_) {
      s.f32.reserve(static_cast<size_t>(size));
      s.f64.reserve(static_cast<size_t>(size));
      s.i64.reserve(static_cast<size_t>(size));
    }
  }

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void all_reduce(int rank, void* data, int64_t n, DataType dtype, ReduceOp op) {
    if (dtype == DataType::Int64 && op == ReduceOp::Mean)
      fail("all_reduce: the mean of int64 values is not exact; reduce with Sum and divide");
    if (size_ == 1) return;
    publish(rank, data, n, dtype, "all_reduce");
    // Slice r of every buffer belongs to rank r.
    int64_t per = ((n + size_ - 1) / size_ + 15) / 16 * 16;  // whole cache lines each
    int64_t begin = std::min<int64_t>(n, per * rank), end = std::min<int64_t>(n, begin + per);
    with_type(dtype, [&]<class T>(T*) {
      std::vector<T*>& inputs = scratch<T>(rank);
      inputs.clear();
      for (int q = 0; q < size_; ++q) inputs.push_back(buffer<T>(q) + begin);
      reduce_to_all(inputs.data(), size_, end - begin, op);
    });
    wait(rank, "all_reduce");
  }

  // Rank r owns slice r of the buffers' concatenation, walked buffer by buffer.
  void all_reduce_sum(int rank, std::span<const std::span<float>> buffers) {
    if (size_ == 1) return;
    int64_t n = 0;
    for (std::span<float> b : buffers) n += static_cast<int64_t>(b.size());
    groups_[static_cast<size_t>(rank)] = buffers;
    publish(rank, nullptr, n, DataType::Float32, "all_reduce");
    for (int q = 0; q < size_; ++q) {
      std::span<const std::span<float>> other = groups_[static_cast<size_t>(q)];
      bool same = other.size() == buffers.size();
      for (size_t i = 0; same && i < buffers.size(); ++i) same = other[i].size() == buffers[i].size();
      if (same) continue;
      // Every rank finds a mismatch; none leaves (freeing its buffers) before all have looked.
      size_t theirs = other.size();
      wait(rank, "all_reduce");
      fail(
          "all_reduce: mismatched buffers: replica {} passed {} buffers and replica {} passed {}, or of other "
          "sizes",
          rank, buffers.size(), q, theirs);
    }
    int64_t per = ((n + size_ - 1) / size_ + 15) / 16 * 16;  // whole cache lines each
    int64_t begin = std::min(n, per * rank), end = std::min(n, per * (rank + 1));
    std::vector<float*>& inputs = scratch<float>(rank);
    int64_t at = 0;
    for (size_t i = 0; i < buffers.size() && at < end; ++i) {
      auto size = static_cast<int64_t>(buffers[i].size());
      int64_t b = std::max(begin, at), e = std::min(end, at + size);
      if (b < e) {
        inputs.clear();
        for (int q = 0; q < size_; ++q) inputs.push_back(groups_[static_cast<size_t>(q)][i].data() + (b - at));
        sum_to_all(inputs.data(), size_, e - b);
      }
      at += size;
    }
    wait(rank, "all_reduce");
  }

  void reduce_scatter(int rank, const void* send, void* recv, int64_t n, DataType dtype, ReduceOp op) {
    if (dtype == DataType::Int64 && op == ReduceOp::Mean)
      fail("reduce_scatter: the mean of int64 values is not exact; reduce with Sum and divide");
    publish(rank, const_cast<void*>(send), n, dtype, "reduce_scatter");
    with_type(dtype, [&]<class T>(T*) {
      std::vector<T*>& inputs = scratch<T>(rank);
      inputs.clear();
      for (int q = 0; q < size_; ++q) inputs.push_back(buffer<T>(q) + rank * n);
      auto* out = static_cast<T*>(recv);
      for (int64_t i = 0; i < n; ++i) out[i] = reduce_one<T>(inputs.data(), size_, i, op);
    });
    wait(rank, "reduce_scatter");  // the others still read this rank's send buffer until here
  }

  void all_gather(int rank, const void* send, int64_t n, void* recv, DataType dtype) {
    publish(rank, const_cast<void*>(send), n, dtype, "all_gather");
    size_t bytes = static_cast<size_t>(n) * data_type_size(dtype);
    for (int q = 0; q < size_; ++q)
      if (bytes > 0) std::memcpy(static_cast<char*>(recv) + static_cast<size_t>(q) * bytes, buffers_[q], bytes);
    wait(rank, "all_gather");
  }

  void broadcast(int rank, void* data, int64_t n, DataType dtype, int root) {
    check_peer(root, "broadcast");
    if (size_ == 1) return;
    publish(rank, data, n, dtype, "broadcast");
    size_t bytes = static_cast<size_t>(n) * data_type_size(dtype);
    if (rank != root && bytes > 0) std::memcpy(data, buffers_[static_cast<size_t>(root)], bytes);
    wait(rank, "broadcast");
  }

  void send(int rank, const void* data, int64_t n, DataType dtype, int peer, int tag) {
    check_peer(peer, "send");
    Message m{dtype, n, std::vector<char>(static_cast<size_t>(n) * data_type_size(dtype))};
    if (!m.bytes.empty()) std::memcpy(m.bytes.data(), data, m.bytes.size());
    std::lock_guard lock(mutex_);
    if (!aborted_.empty()) fail("send: {}", aborted_);
    mail_[{rank, peer, tag}].push_back(std::move(m));
    posted_.fetch_add(1, std::memory_order_release);
    changed_.notify_all();
  }

  void recv(int rank, void* data, int64_t n, DataType dtype, int peer, int tag) {
    check_peer(peer, "recv");
    auto key = std::make_tuple(peer, rank, tag);
    // As the barrier: a brief spin while a core is free for it, before sleeping (a pipeline's
    // stages hand each other a message per micro-batch, each a sleep and a wake otherwise).
    for (uint64_t seen = 0;;) {
      {
        std::lock_guard lock(mutex_);
        auto it = mail_.find(key);
        if (!aborted_.empty() || (it != mail_.end() && !it->second.empty())) break;
        seen = posted_.load(std::memory_order_relaxed);
      }
      if (!core::spin_until(core::spin_allowance(size_),
                            [&] { return posted_.load(std::memory_order_acquire) != seen; }))
        break;
    }
    std::unique_lock lock(mutex_);
    bool arrived = changed_.wait_for(lock, timeout_, [&] {
      auto it = mail_.find(key);
      return !aborted_.empty() || (it != mail_.end() && !it->second.empty());
    });
    if (!aborted_.empty()) fail("recv: {}", aborted_);
    if (!arrived) {
      aborted_ = fmt::format("replica {} waited {} ms in recv for a message from replica {} (tag {})", rank,
                             timeout_.count(), peer, tag);
      changed_.notify_all();
      fail("recv: timed out: {}", aborted_);
    }
    std::deque<Message>& queue = mail_[key];
    Message m = std::move(queue.front());
    queue.pop_front();
    if (m.dtype != dtype || m.count != n)
      fail("recv: replica {} expected {} {} from replica {} (tag {}), but it sent {} {}", rank, n, unit(dtype), peer,
           tag, m.count, unit(m.dtype));
    if (!m.bytes.empty()) std::memcpy(data, m.bytes.data(), m.bytes.size());
  }

  void barrier(int rank) { wait(rank, "barrier"); }

  // The group of the ranks passing `color` and this rank's place in it (null group for a negative color).
  std::pair<std::shared_ptr<Group>, int> split(int rank, int color, int key) {
    std::vector<int64_t> mine{color, key}, all(static_cast<size_t>(2 * size_));
    all_gather(rank, mine.data(), 2, all.data(), DataType::Int64);
    uint64_t sequence = splits_made_[static_cast<size_t>(rank)]++;  // the same on every rank: split is collective
    if (color < 0) return {nullptr, -1};
    std::vector<std::pair<int64_t, int>> members;  // (key, rank)
    for (int q = 0; q < size_; ++q)
      if (all[static_cast<size_t>(2 * q)] == color) members.emplace_back(all[static_cast<size_t>(2 * q + 1)], q);
    std::sort(members.begin(), members.end());
    int new_rank = static_cast<int>(std::find(members.begin(), members.end(), std::pair<int64_t, int>(key, rank)) -
                                    members.begin());
    std::lock_guard lock(mutex_);
    Pending& pending = pending_splits_[{sequence, color}];
    if (!pending.group) pending.group = std::make_shared<Group>(static_cast<int>(members.size()), timeout_);
    std::shared_ptr<Group> group = pending.group;
    if (++pending.taken == static_cast<int>(members.size())) pending_splits_.erase({sequence, color});
    return {group, new_rank};
  }

  void abort(int rank, const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (aborted_.empty()) aborted_ = fmt::format("replica {} failed: {}", rank, reason);
    changed_.notify_all();
  }

 private:
  struct Message {
    DataType dtype;
    int64_t count;
    std::vector<char> bytes;
  };
  struct Pending {
    std::shared_ptr<Group> group;
    int taken = 0;
  };

  // Each rank's list of input pointers, kept so that a collective allocates nothing.
  struct Scratch {
    std::vector<float*> f32;
    std::vector<double*> f64;
    std::vector<int64_t*> i64;
  };
  template <class T>
  std::vector<T*>& scratch(int rank) {
    Scratch& s = scratch_[static_cast<size_t>(rank)];
    if constexpr (std::is_same_v<T, float>) return s.f32;
    else if constexpr (std::is_same_v<T, double>) return s.f64;
    else return s.i64;
  }

  template <class T>
  T* buffer(int q) const {
    return static_cast<T*>(buffers_[static_cast<size_t>(q)]);
  }

  void check_peer(int peer, const char* op) const {
    if (peer < 0 || peer >= size_) fail("{}: rank {} out of range [0, {})", op, peer, size_);
  }

  // Every rank states its buffer, size and type; they must agree (Horovod-style check, both sides named).
  void publish(int rank, void* data, int64_t n, DataType dtype, const char* op) {
    buffers_[static_cast<size_t>(rank)] = data;
    sizes_[static_cast<size_t>(rank)] = n;
    dtypes_[static_cast<size_t>(rank)] = dtype;
    wait(rank, op);
    for (int r = 0; r < size_; ++r) {
      if (sizes_[static_cast<size_t>(r)] != n || dtypes_[static_cast<size_t>(r)] != dtype) {
        int64_t theirs = sizes_[static_cast<size_t>(r)];
        DataType their_type = dtypes_[static_cast<size_t>(r)];
        wait(rank, op);  // nobody leaves (freeing its buffer) before all have looked
        fail("{}: mismatched sizes: replica {} passed {} {}, but replica {} passed {} {}", op, rank, n, unit(dtype), r,
             theirs, unit(their_type));
      }
    }
  }

  // A generation barrier that gives up on abort or timeout. While every rank has a free core
  // a waiter spins briefly before sleeping (a sleep and wake costs a system call each); with more
  // ranks than free cores it sleeps at once, so that the ranks it waits for get the core.
  void wait(int rank, const char* op) {
    uint64_t generation;
    {
      std::lock_guard lock(mutex_);
      if (!aborted_.empty()) fail("{}: {}", op, aborted_);
      generation = generation_.load(std::memory_order_relaxed);
      if (++arrived_ == size_) {
        arrived_ = 0;
        generation_.store(generation + 1, std::memory_order_release);
        if (sleepers_ > 0) changed_.notify_all();
        return;
      }
    }
    if (core::spin_until(core::spin_allowance(size_),
                         [&] { return generation_.load(std::memory_order_acquire) != generation; }))
      return;
    std::unique_lock lock(mutex_);
    ++sleepers_;
    changed_.wait_for(lock, timeout_, [&] { return generation_.load() != generation || !aborted_.empty(); });
    --sleepers_;
    if (generation_.load() != generation) return;
    if (!aborted_.empty()) fail("{}: {}", op, aborted_);
    aborted_ = fmt::format("replica {} waited {} ms in {} for the others; {} of {} arrived", rank, timeout_.count(), op,
                           arrived_, size_);
    changed_.notify_all();
    fail("{}: timed out: {}", op, aborted_);
  }

  int size_;
  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> posted_{0};  // messages sent so far (what a spinning receiver watches)
  std::vector<void*> buffers_;
  std::vector<int64_t> sizes_;
  std::vector<DataType> dtypes_;
  std::vector<Scratch> scratch_;
  std::vector<std::span<const std::span<float>>> groups_;  // each rank's buffers, grouped all-reduce
  std::vector<uint64_t> splits_made_;                      // per rank
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0, sleepers_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::string aborted_;
  std::map<std::tuple<int, int, int>, std::deque<Message>> mail_;  // (from, to, tag)
  std::map<std::pair<uint64_t, int>, Pending> pending_splits_;     // (split number, color)
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  int local_rank() const override { return rank_; }
  int local_size() const override { return group_->size(); }
  bool shares_memory() const override { return true; }

  void all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) override {
    Timeline::Span span(timeline_, "all_reduce", nullptr, count * static_cast<int64_t>(data_type_size(dtype)));
    group_->all_reduce(rank_, data, count, dtype, op);
  }
  void all_reduce(std::span<const std::span<float>> buffers, ReduceOp op) override {
    if (op == ReduceOp::Sum) return group_->all_reduce_sum(rank_, buffers);
    Communicator::all_reduce(buffers, op);
  }
  void reduce_scatter(const void* send, void* recv, int64_t recv_count, DataType dtype, ReduceOp op) override {
    group_->reduce_scatter(rank_, send, recv, recv_count, dtype, op);
  }
  void all_gather(const void* send, int64_t count, void* recv, DataType dtype) override {
    Timeline::Span span(timeline_, "all_gather", nullptr, count * static_cast<int64_t>(data_type_size(dtype)));
    group_->all_gather(rank_, send, count, recv, dtype);
  }
  void broadcast(void* data, int64_t count, DataType dtype, int root) override {
    group_->broadcast(rank_, data, count, dtype, root);
  }
  void send(const void* data, int64_t count, DataType dtype, int peer, int tag) override {
    group_->send(rank_, data, count, dtype, peer, tag);
  }
  void recv(void* data, int64_t count, DataType dtype, int peer, int tag) override {
    group_->recv(rank_, data, count, dtype, peer, tag);
  }
  void barrier() override { group_->barrier(rank_); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto [group, rank] = group_->split(rank_, color, key);
    if (!group) return nullptr;
    return std::make_unique<InProcessCommunicator>(std::move(group), rank);
  }
  void abort(const std::string& reason) override { group_->abort(rank_, reason); }
  // Where all_reduce and all_gather record their spans (a model-parallel strategy's devices call
  // them inside ops; a data-parallel reducer records its own).
  void set_timeline(Timeline* timeline) override { timeline_ = timeline; }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
  Timeline* timeline_ = nullptr;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int ranks, std::chrono::milliseconds timeout) {
  auto group = std::make_shared<Group>(ranks, timeout);
  std::vector<std::unique_ptr<Communicator>> handles;
  for (int r = 0; r < ranks; ++r) handles.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return handles;
}

}  // namespace tandem::distribute
