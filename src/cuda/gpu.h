#pragma once
// One GPU as Tandem holds it (built with a CUDA toolkit only): its stream, its cuBLAS handle and
// its caching allocator, made on first use. The memory and the kernels registered for
// Device::Kind::CUDA (memory.cpp, backend.cpp) reach the GPU of a device through gpu(index).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/caching_allocator.h"
#include "core/device_memory.h"
#include "cuda/device_api.h"
#include "cuda/logical.h"
#include "kernels/backend.h"

namespace tandem::cuda {

// Throws a tandem::Error naming `what` and the CUDA error.
[[noreturn]] void fail_call(int code, std::string_view what);
// fail_call when code is not 0, its message formatted only then (a launch's check is on the step's path).
template <class... A>
void check(int code, fmt::format_string<A...> what, A&&... args) {
  if (code != 0) [[unlikely]]
    fail_call(code, fmt::format(what, std::forward<A>(args)...));
}

// The driver's calls the caching allocator makes, on one GPU.
class GpuApi final : public core::DeviceApi {
 public:
  explicit GpuApi(int index) : index_(index) {}
  void* allocate(size_t bytes) override;
  void release(void* pointer) override;
  void* record_event(core::StreamId stream) override;
  bool event_done(void* event) override;
  void destroy_event(void* event) override;

 private:
  int index_;
};

// Pinned host blocks that host-to-GPU copies go through, so that the host never waits for an
// upload: the host's bytes are copied into a free block and the GPU's copy queued from there; a block
// is used again once the copy queued from it has run. Kept until the process ends.
class HostStaging {
 public:
  // Copies `bytes` of host memory to `to` on `stream` (GPU `device`), returning once `host` may be
  // reused: through a staging block up to kLargest bytes, else straight and waited for.
  void upload(void* to, const void* host, size_t bytes, void* stream, int device);
  static constexpr size_t kLargest = size_t{64} << 20, kSmallest = size_t{64} << 10;
  static constexpr size_t kMostBlocks = 16;  // past it, the stream's queue is waited for

 private:
  struct Block {
    void* pointer = nullptr;
    size_t size = 0;
    void* event = nullptr;  // recorded after the last copy from it; null once that copy has run
  };
  std::mutex mutex_;
  std::vector<Block> blocks_;
};

// Made on first use and kept until the process ends (its blocks, stream and handle with it).
struct Gpu {
  Gpu(int index, LogicalGpu logical);  // device cuda:index, on its card
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  // Makes this GPU the calling thread's current one (every call into the runtime does first).
  void use() const;
  core::StreamId stream_id() const { return reinterpret_cast<core::StreamId>(stream); }
  // Device memory for a call's scratch, handed back (stream-ordered) when the Scratch ends; none
  // (a null pointer) for 0 bytes.
  class Scratch {
   public:
    Scratch(Gpu& gpu, size_t bytes)
        : gpu_(gpu), pointer_(bytes == 0 ? nullptr : gpu.allocator.allocate(bytes, gpu.stream_id())) {}
    ~Scratch() {
      if (pointer_ != nullptr) gpu_.allocator.deallocate(pointer_);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    template <class T>
    T* as() const {
      return static_cast<T*>(pointer_);
    }

   private:
    Gpu& gpu_;
    void* pointer_;
  };

  int index;     // cuda:index
  int physical;  // the card (cudaSetDevice's ordinal)
  void* stream = nullptr;
  void* blas = nullptr;
  std::mutex blas_mutex;           // a cuBLAS handle is used by one thread at a time
  bool blas_tf32 = false;          // the handle's math mode (under blas_mutex)
  void* blas_workspace = nullptr;  // cuBLAS's workspace, from the caching allocator (kept)
  bool bf16_products = false;      // compute capability 8.0 or later
  GpuApi api;
  core::CachingAllocator allocator;
  HostStaging staging;
  std::unique_ptr<kernels::Backend> backend;
};

// GPU `index`, made on first use; fails naming cuda:index when there is no such GPU.
Gpu& gpu(int index);
// The GPUs made so far (memory_stats of one not made: zeros).
Gpu* gpu_if_made(int index);

std::unique_ptr<kernels::Backend> make_backend(Gpu& gpu);
// The memory of Device::Kind::CUDA, and the kernels of cuda:index.
core::DeviceMemory& memory();
kernels::Backend& backend(int index);

}  // namespace tandem::cuda
