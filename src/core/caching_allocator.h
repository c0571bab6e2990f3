#pragma once
// A caching, stream-ordered allocator for a device whose own allocation calls are slow or
// synchronize the device (cudaMalloc and cudaFree do both): what a step frees is kept and handed
// out again, so that a steady-state step asks the device for nothing, as the CPU's pool asks the
// system for nothing.
// - Stream-ordered: a block belongs to the stream it was made for. Freed, it goes back to that
//   stream's cache at once (the stream runs in order: work queued after the free cannot overtake
//   the work that used it), and only that stream gets it again.
// - A block also used on other streams (record_stream, as a copy stream's prefetch) goes back
//   only once an event recorded on each of them at the free has completed.
// - Requests are rounded (512 bytes up to 1 MiB, then 2 MiB steps) and served best-fit from the
//   stream's cache, from a block at most twice the request (larger ones stay for larger asks).
// - When the device refuses, every cached block whose stream is done with it goes back to the
//   device and the request is tried again; then an Error names the request, the bytes in use and
//   the bytes cached.
// The device's calls come through DeviceApi: CUDA's runtime on a GPU, a fake one in the tests.
// Thread-safe.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tandem::core {

using StreamId = uintptr_t;  // a device stream's handle (cudaStream_t), as a number

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual void* allocate(size_t bytes) = 0;  // null: the device has no room
  virtual void release(void* pointer) = 0;
  // An event recorded on `stream` now; whether it has completed; its end.
  virtual void* record_event(StreamId stream) = 0;
  virtual bool event_done(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
};

struct CachingAllocatorStats {
  int64_t device_allocations = 0, device_releases = 0;  // calls to the device
  int64_t reused = 0;                                   // requests served from the cache
  int64_t bytes_in_use = 0, bytes_cached = 0;           // handed out; kept free (rounded sizes)
  int64_t peak_bytes_in_use = 0;                        // the most handed out at once
  int64_t waiting_on_events = 0;                        // freed blocks other streams still use
};

class CachingAllocator {
 public:
  // `limit_bytes`: the most it holds from the device at once, handed out or cached (a logical
  // device's share of its card); past it a request is refused as a full device refuses it. 0: none.
  explicit CachingAllocator(DeviceApi& device, int64_t limit_bytes = 0) : device_(device), limit_(limit_bytes) {}
  // Every block it keeps goes back to the device (a block still handed out is its holder's).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes, StreamId stream);
  void deallocate(void* pointer);
  // `pointer` (handed out) is used on `stream` too: its reuse waits for that stream's work.
  void record_stream(void* pointer, StreamId stream);
  // Every cached block no stream still uses back to the device.
  void empty_cache();
  CachingAllocatorStats stats() const;

  static size_t rounded(size_t bytes);

 private:
  struct Block {
    size_t size = 0;  // rounded
    StreamId stream = 0;
    std::vector<StreamId> also_on;  // other streams it was used on
  };
  struct Waiting {
    void* pointer;
    std::vector<void*> events;
  };
  void take_completed();  // under mutex_: blocks whose events are done back to their cache
  void release_cached();  // under mutex_: every cached block back to the device
  void* from_cache(size_t size, StreamId stream);
  void* from_device(size_t size);  // under mutex_: null past the limit or when the device refuses

  DeviceApi& device_;
  int64_t limit_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;  // every block made, handed out or not
  // Free blocks by stream, then by size.
  std::map<StreamId, std::multimap<size_t, void*>> cached_;
  std::vector<Waiting> waiting_;
  CachingAllocatorStats stats_;
};

}  // namespace tandem::core
