#pragma once
// The pooled allocator behind every tensor, tensor handle and tape node: freed blocks are kept
// in per-size free lists and handed out again, so steady-state training asks the system for nothing.
#include <cstddef>
#include <cstdint>

namespace tandem {

struct AllocatorStats {
  uint64_t system_allocations = 0;  // blocks obtained from the system since start
  // Summed over the threads' own counts: exact while no thread allocates.
  uint64_t pool_allocations = 0;  // every request, served from a free list or not
  uint64_t bytes_in_use = 0;
  uint64_t bytes_reserved = 0;  // in use plus cached in free lists
  // The most in use at once since start or reset_peak(), give or take 256 KiB a thread: each
  // thread's counts join the shared one in steps of that much.
  uint64_t peak_bytes_in_use = 0;
};

namespace memory {
void* allocate(size_t bytes);                  // 64-byte aligned; never returns null (throws)
void deallocate(void* pointer, size_t bytes);  // bytes as passed to allocate
AllocatorStats stats();
void release_cached();  // hands cached free blocks back to the system
void reset_peak();      // the peak starts again from what is in use now
}  // namespace memory

// Base for small objects (tensor handles, tape nodes) allocated through the pool.
struct PoolAllocated {
  static void* operator new(size_t bytes) { return memory::allocate(bytes); }
  static void operator delete(void* p, size_t bytes) { memory::deallocate(p, bytes); }
};

}  // namespace tandem
