#include "tandem/allocator.h"

#include <array>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "tandem/error.h"

namespace tandem::memory {
namespace {

// Size classes are powers of two from 64 bytes to 64 MiB; larger blocks go straight to the
// system and back, since a dataset-sized buffer is made once and caching it would only pin memory.
constexpr int kMinShift = 6;
constexpr int kMaxShift = 26;
constexpr size_t kAlignment = 64;

struct Pool {
  std::mutex mutex;
  std::array<void*, kMaxShift + 1> free_lists{};  // intrusive singly linked lists
  AllocatorStats stats;
};

Pool& pool() {
  static Pool* instance = new Pool();  // never destroyed: tensors may outlive static destructors
  return *instance;
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
  std::lock_guard lock(p.mutex);
  p.stats.pool_allocations++;
  if (cls > kMaxShift) {
    p.stats.system_allocations++;
    p.stats.bytes_in_use += bytes;
    p.stats.bytes_reserved += bytes;
    return system_allocate(bytes);
  }
  size_t block = size_t{1} << cls;
  p.stats.bytes_in_use += block;
  if (void* head = p.free_lists[cls]) {
    p.free_lists[cls] = *static_cast<void**>(head);
    return head;
  }
  p.stats.system_allocations++;
  p.stats.bytes_reserved += block;
  return system_allocate(block);
}

void deallocate(void* pointer, size_t bytes) {
  if (pointer == nullptr) return;
  Pool& p = pool();
  int cls = size_class(bytes);
  std::lock_guard lock(p.mutex);
  if (cls > kMaxShift) {
    p.stats.bytes_in_use -= bytes;
    p.stats.bytes_reserved -= bytes;
    std::free(pointer);
    return;
  }
  p.stats.bytes_in_use -= size_t{1} << cls;
  *static_cast<void**>(pointer) = p.free_lists[cls];
  p.free_lists[cls] = pointer;
}

AllocatorStats stats() {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  return p.stats;
}

void release_cached() {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  for (int cls = 0; cls <= kMaxShift; ++cls) {
    while (void* head = p.free_lists[cls]) {
      p.free_lists[cls] = *static_cast<void**>(head);
      p.stats.bytes_reserved -= size_t{1} << cls;
      std::free(head);
    }
  }
}

}  // namespace tandem::memory
