// The caching, stream-ordered device allocator (src/core/caching_allocator.h) over a fake device
// that counts its calls, holds a byte budget, and completes events when the test says: a steady
// step asks the device for nothing, a stream gets back only its own blocks, a block used on
// another stream waits for that stream's event, the cache goes back to the device when the device
// is full, and a request past the budget (or the allocator's own limit) is an Error naming the sizes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/caching_allocator.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using core::CachingAllocator;
using core::StreamId;

class FakeDevice : public core::DeviceApi {
 public:
  explicit FakeDevice(size_t budget = size_t{1} << 40) : budget_(budget) {}
  ~FakeDevice() override { EXPECT_TRUE(live_.empty()) << live_.size() << " device blocks never released"; }
  void* allocate(size_t bytes) override {
    if (used_ + bytes > budget_) return nullptr;
    void* p = std::malloc(bytes);
    live_[p] = bytes;
    used_ += bytes;
    ++allocations;
    return p;
  }
  void release(void* p) override {
    auto it = live_.find(p);
    ASSERT_NE(it, live_.end()) << "released twice or never made";
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
  }
  void* record_event(StreamId stream) override {
    events_.push_back({stream, false});
    return reinterpret_cast<void*>(events_.size());  // 1-based: never null
  }
  bool event_done(void* event) override { return events_.at(reinterpret_cast<size_t>(event) - 1).second; }
  void destroy_event(void* event) override {
    ++destroyed;
    (void)event;
  }
  // Every event recorded on `stream` so far completes (its work ran).
  void finish(StreamId stream) {
    for (auto& [s, done] : events_)
      if (s == stream) done = true;
  }
  size_t used() const { return used_; }
  int64_t allocations = 0, destroyed = 0;

 private:
  size_t budget_, used_ = 0;
  std::map<void*, size_t> live_;
  std::vector<std::pair<StreamId, bool>> events_;
};

constexpr StreamId kCompute = 1, kCopy = 2;

TEST(CachingAllocator, RoundsSmallRequestsTo512BytesAndLargeOnesTo2MiB) {
  EXPECT_EQ(CachingAllocator::rounded(0), 512u);
  EXPECT_EQ(CachingAllocator::rounded(1), 512u);
  EXPECT_EQ(CachingAllocator::rounded(512), 512u);
  EXPECT_EQ(CachingAllocator::rounded(513), 1024u);
  EXPECT_EQ(CachingAllocator::rounded(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::rounded((size_t{1} << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(CachingAllocator::rounded((size_t{5} << 20) + 7), size_t{6} << 20);
}

// A training step's pattern (activations made and freed, some reused across the step): after the
// first step, no step asks the device for memory.
TEST(CachingAllocator, ASteadyStepAsksTheDeviceForNothing) {
  FakeDevice device;
  CachingAllocator cache(device);
  const std::vector<size_t> step{784 * 256 * 4, 256 * 128 * 4, 128 * 4, 256 * 10 * 4, 40, 3 << 20, 100000};
  for (int s = 0; s < 20; ++s) {
    std::vector<void*> held;
    for (size_t bytes : step) held.push_back(cache.allocate(bytes, kCompute));
    for (size_t i = 0; i < held.size(); i += 2) cache.deallocate(held[i]);  // some die early
    for (size_t bytes : {size_t{40}, size_t{128 * 4}}) held.push_back(cache.allocate(bytes, kCompute));
    for (size_t i = 1; i < held.size(); i += 2) cache.deallocate(held[i]);
    for (size_t i = 0; i < held.size(); i += 2)
      if (i >= step.size()) cache.deallocate(held[i]);
    if (s == 0) EXPECT_GT(device.allocations, 0);
  }
  int64_t after_first = device.allocations;
  for (int s = 0; s < 5; ++s) {
    std::vector<void*> held;
    for (size_t bytes : step) held.push_back(cache.allocate(bytes, kCompute));
    for (void* p : held) cache.deallocate(p);
  }
  EXPECT_EQ(device.allocations, after_first) << "a steady-state step allocated on the device";
  core::CachingAllocatorStats st = cache.stats();
  EXPECT_EQ(st.bytes_in_use, 0);
  EXPECT_GT(st.reused, 100);
  EXPECT_EQ(st.device_releases, 0);
}

TEST(CachingAllocator, ThePeakIsTheMostHandedOutAtOnce) {
  FakeDevice device;
  CachingAllocator cache(device);
  void* a = cache.allocate(1000, kCompute);  // 1024 rounded
  void* b = cache.allocate(3000, kCompute);  // 3072
  cache.deallocate(a);
  void* c = cache.allocate(1000, kCompute);  // from the cache
  EXPECT_EQ(cache.stats().peak_bytes_in_use, 1024 + 3072);
  void* d = cache.allocate(512, kCompute);
  EXPECT_EQ(cache.stats().peak_bytes_in_use, 1024 + 3072 + 512);
  for (void* p : {b, c, d}) cache.deallocate(p);
  EXPECT_EQ(cache.stats().bytes_in_use, 0);
  EXPECT_EQ(cache.stats().peak_bytes_in_use, 1024 + 3072 + 512) << "the peak stays after the blocks go back";
}

TEST(CachingAllocator, AStreamGetsBackOnlyItsOwnBlocks) {
  FakeDevice device;
  CachingAllocator cache(device);
  void* a = cache.allocate(4096, kCompute);
  cache.deallocate(a);
  void* b = cache.allocate(4096, kCopy);
  EXPECT_NE(b, a) << "a block freed by the compute stream went to the copy stream with no event between them";
  EXPECT_EQ(device.allocations, 2);
  EXPECT_EQ(cache.allocate(4096, kCompute), a);  // its own stream: at once, from the cache
  cache.deallocate(a);
  cache.deallocate(b);
}

// A block the copy stream also used (a prefetched batch): freed on the compute stream, it waits
// until an event recorded on the copy stream at the free has completed.
TEST(CachingAllocator, ABlockUsedOnAnotherStreamWaitsForThatStreamsEvent) {
  FakeDevice device;
  CachingAllocator cache(device);
  void* batch = cache.allocate(1 << 16, kCompute);
  cache.record_stream(batch, kCopy);
  cache.record_stream(batch, kCompute);  // its own stream: nothing to wait for
  cache.deallocate(batch);
  EXPECT_EQ(cache.stats().waiting_on_events, 1);
  void* next = cache.allocate(1 << 16, kCompute);
  EXPECT_NE(next, batch) << "reused while the copy stream may still be writing it";
  device.finish(kCopy);
  void* again = cache.allocate(1 << 16, kCompute);
  EXPECT_EQ(again, batch) << "the copy stream's event completed: the block is the compute stream's again";
  EXPECT_EQ(cache.stats().waiting_on_events, 0);
  EXPECT_EQ(device.destroyed, 1);
  cache.deallocate(next);
  cache.deallocate(again);
}

// Best fit, at most twice the request: a small ask does not pin a large block.
TEST(CachingAllocator, ServesBestFitWithinTwiceTheRequest) {
  FakeDevice device;
  CachingAllocator cache(device);
  void* large = cache.allocate(1 << 20, kCompute);
  void* medium = cache.allocate(6000, kCompute);
  cache.deallocate(large);
  cache.deallocate(medium);
  EXPECT_EQ(cache.allocate(4000, kCompute), medium) << "6,144 bytes kept serve a 4,096-byte request";
  void* small = cache.allocate(1000, kCompute);
  EXPECT_NE(small, large) << "a 1 MiB block served a 1 KiB request";
  EXPECT_EQ(cache.stats().bytes_in_use, 6144 + 1024);
  cache.deallocate(medium);
  cache.deallocate(small);
}

// The device full: the cache goes back to it and the request is tried again; past that, an Error
// naming the request and what is held.
TEST(CachingAllocator, AFullDeviceGetsTheCacheBackThenARefusalNamesTheSizes) {
  FakeDevice device(size_t{8} << 20);
  CachingAllocator cache(device);
  void* a = cache.allocate(size_t{4} << 20, kCompute);
  void* b = cache.allocate(size_t{4} << 20, kCopy);
  cache.deallocate(a);
  cache.deallocate(b);
  EXPECT_EQ(device.used(), size_t{8} << 20) << "freed blocks stay cached";
  void* c = cache.allocate(size_t{6} << 20, kCompute);  // no cached block fits: the cache goes back
  EXPECT_EQ(cache.stats().device_releases, 2);
  EXPECT_EQ(device.used(), size_t{6} << 20);
  std::string error = error_of([&] { cache.allocate(size_t{3} << 20, kCompute); });
  EXPECT_NE(error.find("no room for 3145728 bytes (4194304 rounded): 6291456 bytes are in use"), std::string::npos)
      << error;
  EXPECT_NE(error_of([&] { cache.deallocate(&error); }).find("was not handed out by this allocator"),
            std::string::npos);
  cache.deallocate(c);
  cache.empty_cache();
  EXPECT_EQ(device.used(), 0u);
  EXPECT_EQ(cache.stats().bytes_cached, 0);
}

// A logical device's share of its card (limit_bytes): the device has room, but past the limit a
// request is refused as on a full device: the cache goes back first, then an Error names the limit.
TEST(CachingAllocator, ALimitRefusesPastItsShareAsAFullDevice) {
  FakeDevice device;
  CachingAllocator cache(device, int64_t{8} << 20);
  void* a = cache.allocate(size_t{4} << 20, kCompute);
  void* b = cache.allocate(size_t{4} << 20, kCopy);
  cache.deallocate(b);
  void* c = cache.allocate(size_t{4} << 20, kCompute);  // b's cached block is the copy stream's: it goes back
  EXPECT_EQ(cache.stats().device_releases, 1);
  EXPECT_EQ(device.used(), size_t{8} << 20);
  std::string error = error_of([&] { cache.allocate(512, kCompute); });
  EXPECT_NE(error.find("no room for 512 bytes (512 rounded) within the device's memory limit of 8388608 bytes"),
            std::string::npos)
      << error;
  cache.deallocate(a);
  cache.deallocate(c);
  cache.empty_cache();
  EXPECT_EQ(device.used(), 0u);
}

}  // namespace
}  // namespace tandem::testing
