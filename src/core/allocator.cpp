#include "tandem/allocator.h"

#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "tandem/error.h"

namespace tandem::memory {
namespace {

// Size classes are powers of two from 64 bytes to 64 MiB; larger blocks go straight to the
// system and back, since a dataset-sized buffer is made once and caching it would only pin memory.
constexpr int kMinShift = 6;
constexpr int kMaxShift = 26;
constexpr size_t kAlignment = 64;
// Each thread keeps a few freed blocks per class for itself, so that the training thread and
// a pipeline or replica thread do not meet on the shared lock for every tensor.
constexpr int kThreadCacheBlocks = 16;
// Blocks move between a thread's cache and the pool in batches (a thread that frees what another
// made, as replicas do with a step's shared tensors, would otherwise take the lock for each).
constexpr int kTransferBlocks = kThreadCacheBlocks / 2;

// A thread's counts of its own requests and of the bytes it took less those it gave back (which
// may be negative: a thread may free what another made), written by that thread alone and read by
// stats(); the bytes go to the shared count once they differ from it by kPendingBytes, so that
// threads allocating at once do not contend on one counter for every tensor handle.
constexpr int64_t kPendingBytes = int64_t{1} << 18;
struct ThreadCounts {
  std::atomic<uint64_t> requests{0};
  std::atomic<int64_t> pending{0};  // bytes in use not yet in the shared count
};

struct Pool {
  std::mutex mutex;
  std::array<void*, kMaxShift + 1> free_lists{};  // intrusive singly linked lists
  std::atomic<uint64_t> system_allocations{0}, bytes_reserved{0}, peak_bytes_in_use{0};
  std::atomic<int64_t> bytes_in_use{0};      // less the threads' pending bytes
  std::vector<const ThreadCounts*> threads;  // of the living threads; under mutex
  uint64_t finished_requests = 0;            // of the threads that ended; under mutex
};

Pool& pool() {
  static Pool* instance = new Pool();  // never destroyed: tensors may outlive static destructors
  return *instance;
}

void note_peak(Pool& p, uint64_t in_use) {
  uint64_t peak = p.peak_bytes_in_use.load(std::memory_order_relaxed);
  while (in_use > peak && !p.peak_bytes_in_use.compare_exchange_weak(peak, in_use, std::memory_order_relaxed)) {
  }
}

struct ThreadCache {
  std::array<std::array<void*, kThreadCacheBlocks>, kMaxShift + 1> blocks{};
  std::array<int, kMaxShift + 1> count{};
  ThreadCounts counts;
  ThreadCache() {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    p.threads.push_back(&counts);
  }
  // A request of `bytes` (negative: given back), counted by this thread.
  void count_bytes(int64_t bytes) {
    int64_t pending = counts.pending.load(std::memory_order_relaxed) + bytes;
    if (pending < kPendingBytes && pending > -kPendingBytes)
      return counts.pending.store(pending, std::memory_order_relaxed);
    Pool& p = pool();
    int64_t shared = p.bytes_in_use.fetch_add(pending, std::memory_order_relaxed) + pending;
    counts.pending.store(0, std::memory_order_relaxed);
    if (shared > 0) note_peak(p, static_cast<uint64_t>(shared));
  }
  ~ThreadCache() {  // a finished thread hands its blocks and counts back
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    int64_t pending = counts.pending.load(std::memory_order_relaxed);
    int64_t shared = p.bytes_in_use.fetch_add(pending, std::memory_order_relaxed) + pending;
    if (shared > 0) note_peak(p, static_cast<uint64_t>(shared));
    p.finished_requests += counts.requests.load(std::memory_order_relaxed);
    std::erase(p.threads, &counts);
    for (int cls = 0; cls <= kMaxShift; ++cls)
      for (int i = 0; i < count[static_cast<size_t>(cls)]; ++i) {
        void* b = blocks[static_cast<size_t>(cls)][static_cast<size_t>(i)];
        *static_cast<void**>(b) = p.free_lists[static_cast<size_t>(cls)];
        p.free_lists[static_cast<size_t>(cls)] = b;
      }
  }
};

ThreadCache& thread_cache() {
  thread_local ThreadCache cache;
  return cache;
}

int size_class(size_t bytes) {
  size_t rounded = std::bit_ceil(bytes < (size_t{1} << kMinShift) ? (size_t{1} << kMinShift) : bytes);
  return std::countr_zero(rounded);
}

void* system_allocate(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (p == nullptr) fail("memory: out of memory allocating {} bytes", bytes);
  return p;
}

}  // namespace

void* allocate(size_t bytes) {
  Pool& p = pool();
  int cls = size_class(bytes);
  ThreadCache& local = thread_cache();
  local.counts.requests.store(local.counts.requests.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (cls > kMaxShift) {
    p.system_allocations.fetch_add(1, std::memory_order_relaxed);
    local.count_bytes(static_cast<int64_t>(bytes));
    p.bytes_reserved.fetch_add(bytes, std::memory_order_relaxed);
    return system_allocate(bytes);
  }
  auto c = static_cast<size_t>(cls);
  size_t block = size_t{1} << cls;
  local.count_bytes(static_cast<int64_t>(block));
  if (local.count[c] > 0) return local.blocks[c][static_cast<size_t>(--local.count[c])];
  {  // a batch from the pool: one lock for several blocks
    std::lock_guard lock(p.mutex);
    while (local.count[c] < kTransferBlocks && p.free_lists[c] != nullptr) {
      void* head = p.free_lists[c];
      p.free_lists[c] = *static_cast<void**>(head);
      local.blocks[c][static_cast<size_t>(local.count[c]++)] = head;
    }
  }
  if (local.count[c] > 0) return local.blocks[c][static_cast<size_t>(--local.count[c])];
  p.system_allocations.fetch_add(1, std::memory_order_relaxed);
  p.bytes_reserved.fetch_add(block, std::memory_order_relaxed);
  return system_allocate(block);
}

void deallocate(void* pointer, size_t bytes) {
  if (pointer == nullptr) return;
  Pool& p = pool();
  int cls = size_class(bytes);
  ThreadCache& local = thread_cache();
  if (cls > kMaxShift) {
    local.count_bytes(-static_cast<int64_t>(bytes));
    p.bytes_reserved.fetch_sub(bytes, std::memory_order_relaxed);
    std::free(pointer);
    return;
  }
  auto c = static_cast<size_t>(cls);
  local.count_bytes(-(int64_t{1} << cls));
  if (local.count[c] == kThreadCacheBlocks) {  // a batch to the pool: one lock for several blocks
    std::lock_guard lock(p.mutex);
    for (int i = 0; i < kTransferBlocks; ++i) {
      void* b = local.blocks[c][static_cast<size_t>(--local.count[c])];
      *static_cast<void**>(b) = p.free_lists[c];
      p.free_lists[c] = b;
    }
  }
  local.blocks[c][static_cast<size_t>(local.count[c]++)] = pointer;
}

namespace {

// Requests and bytes in use over every thread (exact while none allocates).
std::pair<uint64_t, uint64_t> totals(Pool& p) {
  std::lock_guard lock(p.mutex);
  uint64_t requests = p.finished_requests;
  int64_t in_use = p.bytes_in_use.load();
  for (const ThreadCounts* t : p.threads) {
    requests += t->requests.load(std::memory_order_relaxed);
    in_use += t->pending.load(std::memory_order_relaxed);
  }
  return {requests, static_cast<uint64_t>(std::max<int64_t>(in_use, 0))};
}

}  // namespace

AllocatorStats stats() {
  Pool& p = pool();
  auto [requests, in_use] = totals(p);
  note_peak(p, in_use);
  return AllocatorStats{p.system_allocations.load(), requests, in_use, p.bytes_reserved.load(),
                        p.peak_bytes_in_use.load()};
}

void reset_peak() {
  Pool& p = pool();
  p.peak_bytes_in_use.store(totals(p).second);
}

void release_cached() {
  Pool& p = pool();
  ThreadCache& local = thread_cache();
  std::lock_guard lock(p.mutex);
  for (int cls = 0; cls <= kMaxShift; ++cls) {
    auto c = static_cast<size_t>(cls);
    for (int i = 0; i < local.count[c]; ++i) {
      std::free(local.blocks[c][static_cast<size_t>(i)]);
      p.bytes_reserved.fetch_sub(size_t{1} << cls, std::memory_order_relaxed);
    }
    local.count[c] = 0;
    while (void* head = p.free_lists[c]) {
      p.free_lists[c] = *static_cast<void**>(head);
      p.bytes_reserved.fetch_sub(size_t{1} << cls, std::memory_order_relaxed);
      std::free(head);
    }
  }
}

}  // namespace tandem::memory
