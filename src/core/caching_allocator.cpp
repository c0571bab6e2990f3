// The caching, stream-ordered device allocator (caching_allocator.h).
#include "core/caching_allocator.h"

#include <algorithm>

#include "tandem/error.h"

namespace tandem::core {

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  for (Waiting& w : waiting_) {  // the device is going away: its streams' work with it
    for (void* e : w.events) device_.destroy_event(e);
    const Block& b = blocks_.at(w.pointer);
    cached_[b.stream].emplace(b.size, w.pointer);
  }
  waiting_.clear();
  release_cached();
}

size_t CachingAllocator::rounded(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kSmallest = size_t{1} << 20;
  size_t step = bytes <= kSmallest ? kSmall : kLarge;
  return std::max(step, (bytes + step - 1) / step * step);
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  size_t size = rounded(bytes);
  std::lock_guard lock(mutex_);
  take_completed();
  if (void* reused = from_cache(size, stream)) {
    auto kept = static_cast<int64_t>(blocks_.at(reused).size);  // it may be larger than asked
    ++stats_.reused;
    stats_.bytes_in_use += kept;
    stats_.bytes_cached -= kept;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return reused;
  }
  void* pointer = from_device(size);
  if (pointer == nullptr) {  // what the streams are done with goes back, then once more
    release_cached();
    pointer = from_device(size);
  }
  if (pointer == nullptr)
    fail(
        "device memory: no room for {} bytes ({} rounded){}: {} bytes are in use and {} more wait for other streams' "
        "work (the cache was given back to the device first)",
        bytes, size, limit_ > 0 ? fmt::format(" within the device's memory limit of {} bytes", limit_) : "",
        stats_.bytes_in_use, stats_.bytes_cached);
  ++stats_.device_allocations;
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  blocks_[pointer] = Block{size, stream, {}};
  return pointer;
}

void* CachingAllocator::from_device(size_t size) {
  if (limit_ > 0 && stats_.bytes_in_use + stats_.bytes_cached + static_cast<int64_t>(size) > limit_) return nullptr;
  return device_.allocate(size);
}

void CachingAllocator::deallocate(void* pointer) {
  if (pointer == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(pointer);
  if (it == blocks_.end()) fail("device memory: {} was not handed out by this allocator", pointer);
  Block& b = it->second;
  stats_.bytes_in_use -= static_cast<int64_t>(b.size);
  stats_.bytes_cached += static_cast<int64_t>(b.size);
  if (b.also_on.empty()) {
    cached_[b.stream].emplace(b.size, pointer);
    return;
  }
  Waiting w{pointer, {}};
  for (StreamId s : b.also_on) w.events.push_back(device_.record_event(s));
  b.also_on.clear();
  waiting_.push_back(std::move(w));
  ++stats_.waiting_on_events;
}

void CachingAllocator::record_stream(void* pointer, StreamId stream) {
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(pointer);
  if (it == blocks_.end()) fail("device memory: record_stream of {}, which this allocator did not hand out", pointer);
  Block& b = it->second;
  if (stream != b.stream && std::find(b.also_on.begin(), b.also_on.end(), stream) == b.also_on.end())
    b.also_on.push_back(stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  take_completed();
  release_cached();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::take_completed() {
  std::erase_if(waiting_, [&](Waiting& w) {
    if (!std::all_of(w.events.begin(), w.events.end(), [&](void* e) { return device_.event_done(e); })) return false;
    for (void* e : w.events) device_.destroy_event(e);
    const Block& b = blocks_.at(w.pointer);
    cached_[b.stream].emplace(b.size, w.pointer);
    --stats_.waiting_on_events;
    return true;
  });
}

void CachingAllocator::release_cached() {
  for (auto& [stream, free] : cached_)
    for (auto& [size, pointer] : free) {
      device_.release(pointer);
      blocks_.erase(pointer);
      ++stats_.device_releases;
      stats_.bytes_cached -= static_cast<int64_t>(size);
    }
  cached_.clear();
}

void* CachingAllocator::from_cache(size_t size, StreamId stream) {
  auto mine = cached_.find(stream);
  if (mine == cached_.end()) return nullptr;
  auto it = mine->second.lower_bound(size);  // best fit: the smallest block as large
  if (it == mine->second.end() || it->first > 2 * size) return nullptr;
  void* pointer = it->second;
  mine->second.erase(it);
  // A block made for a larger request keeps its size (it serves that request again later).
  return pointer;
}

}  // namespace tandem::core
