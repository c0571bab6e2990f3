// The pooled allocator's counts across threads: each thread counts its own requests and bytes,
// joining the shared count in steps, so stats() must still add up exactly once the threads are
// quiet, whoever frees what, and the peak must see what was held at once.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tandem/allocator.h"

namespace tandem {
namespace {

TEST(Allocator, CountsAddUpAcrossThreadsThatFreeEachOthersBlocks) {
  AllocatorStats before = memory::stats();
  memory::reset_peak();
  constexpr int kBlocks = 300;  // 300 × 4 KiB: past the 256 KiB a thread keeps to itself
  constexpr size_t kBytes = 4096;
  std::vector<void*> made(kBlocks);
  std::thread maker([&] {
    for (void*& p : made) p = memory::allocate(kBytes);
  });
  maker.join();  // its pending bytes joined the shared count as it ended
  AllocatorStats held = memory::stats();
  EXPECT_EQ(held.bytes_in_use, before.bytes_in_use + kBlocks * kBytes);
  EXPECT_EQ(held.pool_allocations, before.pool_allocations + kBlocks);
  EXPECT_GE(held.peak_bytes_in_use, held.bytes_in_use);
  // Another thread frees them, and this one makes and frees a few of its own on the way.
  std::thread freer([&] {
    for (void* p : made) memory::deallocate(p, kBytes);
  });
  void* mine = memory::allocate(kBytes);
  AllocatorStats both = memory::stats();  // the freer may be anywhere: only bounds hold
  EXPECT_GE(both.pool_allocations, before.pool_allocations + kBlocks + 1);
  freer.join();
  memory::deallocate(mine, kBytes);
  AllocatorStats after = memory::stats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.pool_allocations, before.pool_allocations + kBlocks + 1);
  EXPECT_GE(after.peak_bytes_in_use, before.bytes_in_use + kBlocks * kBytes);
  // A block freed by another thread is served again: the pool grew by no more than the blocks.
  EXPECT_LE(after.system_allocations, before.system_allocations + kBlocks + 1);
}

}  // namespace
}  // namespace tandem
