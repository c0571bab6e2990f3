// The GPUs (made on first use), and their memory as core holds tensors there. Built with a CUDA toolkit only.
#ifdef TANDEM_WITH_CUDA
#include "cuda/gpu.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>

#include "tandem/cuda.h"
#include "tandem/error.h"

namespace tandem::cuda {

void fail_call(int code, std::string_view what) { fail("CUDA: {}: {}", what, api::error_text(code)); }

void* GpuApi::allocate(size_t bytes) {
  check(api::set_device(index_), "cudaSetDevice");
  void* p = nullptr;
  int code = api::allocate(&p, bytes);
  if (api::out_of_memory(code)) return nullptr;
  check(code, "cudaMalloc of {} bytes on GPU {}", bytes, index_);
  return p;
}
void GpuApi::release(void* pointer) {
  check(api::set_device(index_), "cudaSetDevice");
  check(api::release(pointer), "cudaFree on GPU {}", index_);
}
void* GpuApi::record_event(core::StreamId stream) {
  check(api::set_device(index_), "cudaSetDevice");
  void* event = nullptr;
  check(api::record_event(&event, reinterpret_cast<void*>(stream)), "cudaEventRecord");
  return event;
}
bool GpuApi::event_done(void* event) {
  bool done = false;
  check(api::event_done(event, &done), "cudaEventQuery");
  return done;
}
void GpuApi::destroy_event(void* event) { check(api::destroy_event(event), "cudaEventDestroy"); }

void HostStaging::upload(void* to, const void* host, size_t bytes, void* stream, int device) {
  if (bytes > kLargest) {  // a whole data set moved once: no block kept for it
    check(api::copy_async(to, host, bytes, stream), "copy of {} bytes to cuda:{}", bytes, device);
    check(api::synchronize_stream(stream), "the work queued on cuda:{}", device);
    return;
  }
  std::lock_guard lock(mutex_);
  // The smallest free block that holds the bytes (a block is free once its copy has run).
  auto free_block = [&]() -> Block* {
    Block* found = nullptr;
    for (Block& b : blocks_) {
      if (b.event != nullptr) {
        bool done = false;
        check(api::event_done(b.event, &done), "cudaEventQuery");
        if (!done) continue;
        check(api::destroy_event(b.event), "cudaEventDestroy");
        b.event = nullptr;
      }
      if (b.size >= bytes && (found == nullptr || b.size < found->size)) found = &b;
    }
    return found;
  };
  Block* block = free_block();
  if (block == nullptr && blocks_.size() >= kMostBlocks) {  // the host is far ahead: wait for the GPU
    check(api::synchronize_stream(stream), "the work queued on cuda:{}", device);
    block = free_block();
    if (block == nullptr) {  // none large enough: the smallest gives way to a larger
      auto smallest = std::min_element(blocks_.begin(), blocks_.end(),
                                       [](const Block& a, const Block& b) { return a.size < b.size; });
      check(api::release_pinned(smallest->pointer), "cudaFreeHost");
      blocks_.erase(smallest);
    }
  }
  if (block == nullptr) {
    Block fresh;
    fresh.size = std::max(kSmallest, std::bit_ceil(bytes));
    check(api::allocate_pinned(&fresh.pointer, fresh.size), "cudaMallocHost of {} bytes", fresh.size);
    blocks_.push_back(fresh);
    block = &blocks_.back();
  }
  std::memcpy(block->pointer, host, bytes);
  check(api::copy_async(to, block->pointer, bytes, stream), "copy of {} bytes to cuda:{}", bytes, device);
  check(api::record_event(&block->event, stream), "cudaEventRecord");
}

Gpu::Gpu(int i, LogicalGpu logical)
    : index(i), physical(logical.physical), api(logical.physical), allocator(api, logical.memory_limit_bytes) {
  use();
  char name[256];
  int major = 0, minor = 0;
  size_t total = 0;
  check(api::device_properties(physical, name, sizeof name, &major, &minor, &total), "cudaGetDeviceProperties");
  bf16_products = major >= 8;
  check(api::create_stream(&stream), "cudaStreamCreate on cuda:{}", index);
  check(api::blas_create(&blas, stream), "cublasCreate on cuda:{}", index);
  // cuBLAS's workspace from the allocator, so that it asks the driver for none of its own (32 MiB:
  // what NVIDIA advises for Hopper, enough for earlier cards).
  constexpr size_t kBlasWorkspace = size_t{32} << 20;
  blas_workspace = allocator.allocate(kBlasWorkspace, stream_id());
  check(api::blas_set_workspace(blas, blas_workspace, kBlasWorkspace), "cublasSetWorkspace on cuda:{}", index);
  backend = make_backend(*this);
}
void Gpu::use() const { check(api::set_device(physical), "cudaSetDevice({})", physical); }

namespace {
constexpr int kMaxGpus = 64;
std::mutex gpus_mutex;                           // making one
std::array<std::atomic<Gpu*>, kMaxGpus> gpus{};  // made once, kept until the process ends

Gpu& gpu_of(Device device) { return gpu(device.index); }
}  // namespace

Gpu& gpu(int index) {
  // Every op reaches its GPU here: one load once it is made.
  if (index >= 0 && index < kMaxGpus)
    if (Gpu* made = gpus[static_cast<size_t>(index)].load(std::memory_order_acquire)) return *made;
  std::lock_guard lock(gpus_mutex);
  int count = 0;
  int code = api::device_count(&count);
  if (code != 0 || count == 0)
    fail("device cuda:{} is not available: no GPU can be used here ({})", index,
         code != 0 ? api::error_text(code) : "the CUDA runtime sees none");
  std::optional<LogicalGpu> logical = logical_gpu(index);
  if (!logical || index >= kMaxGpus) {
    int devices = device_count();
    fail("there is no device cuda:{}; this machine has {} GPU device{} (cuda:0{}{})", index, devices,
         devices == 1 ? "" : "s", devices == 1 ? "" : fmt::format(" to cuda:{}", devices - 1),
         devices == count ? "" : fmt::format(", logical devices of its {} card{}", count, count == 1 ? "" : "s"));
  }
  std::atomic<Gpu*>& slot = gpus[static_cast<size_t>(index)];
  if (slot.load(std::memory_order_relaxed) == nullptr) slot.store(new Gpu(index, *logical), std::memory_order_release);
  return *slot.load(std::memory_order_relaxed);
}
bool any_gpu_made() {
  return std::any_of(gpus.begin(), gpus.end(), [](const std::atomic<Gpu*>& g) { return g.load() != nullptr; });
}
Gpu* gpu_if_made(int index) {
  return index >= 0 && index < kMaxGpus ? gpus[static_cast<size_t>(index)].load(std::memory_order_acquire) : nullptr;
}

namespace {
// Work queued on `later` from now on runs after what is queued on `earlier` now.
void wait_for(Gpu& later, Gpu& earlier) {
  void* event = earlier.api.record_event(earlier.stream_id());
  check(api::stream_wait_event(later.stream, event), "cudaStreamWaitEvent");
  earlier.api.destroy_event(event);
}

// Tensors' bytes on the GPUs: the caching allocator on each GPU's stream; every move between
// places is queued on the stream of the device it is for, and returns once the host may read or
// reuse its side.
class GpuMemory final : public core::DeviceMemory {
 public:
  void* allocate(Device device, size_t bytes) override {
    Gpu& g = gpu_of(device);
    return g.allocator.allocate(bytes, g.stream_id());
  }
  void deallocate(Device device, void* pointer, size_t) override { gpu_of(device).allocator.deallocate(pointer); }
  void to_host(Device device, void* host, const void* from, size_t bytes) override {
    Gpu& g = gpu_of(device);
    g.use();
    check(api::copy_async(host, from, bytes, g.stream), "copy of {} bytes from cuda:{}", bytes, device.index);
    check(api::synchronize_stream(g.stream), "the work queued on cuda:{}", device.index);
  }
  // Through a pinned staging block: the host goes on while the GPU uploads.
  void from_host(Device device, void* to, const void* host, size_t bytes) override {
    Gpu& g = gpu_of(device);
    g.use();
    g.staging.upload(to, host, bytes, g.stream, device.index);
  }
  bool host_accessible() const override { return false; }
  void copy_within(Device device, void* to, Device source, const void* from, size_t bytes) override {
    Gpu& g = gpu_of(device);
    g.use();
    Gpu* other = source != device ? &gpu_of(source) : nullptr;  // another GPU, or another logical one of this card
    if (other != nullptr) {                                     // the source's queued work first
      wait_for(g, *other);
      g.use();
    }
    check(api::copy_async(to, from, bytes, g.stream), "copy of {} bytes on cuda:{}", bytes, device.index);
    // And the source's later work (a reuse of its block, freed at once to its stream) after the copy.
    if (other != nullptr) {
      wait_for(*other, g);
      g.use();
    }
  }
  void fill(Device device, void* to, const void* pattern, size_t pattern_bytes, size_t count) override {
    Gpu& g = gpu_of(device);
    g.use();
    check(launch::fill(to, pattern, pattern_bytes, count, g.stream), "fill on cuda:{}", device.index);
  }
};

}  // namespace

core::DeviceMemory& memory() {
  static GpuMemory instance;
  return instance;
}
kernels::Backend& backend(int index) { return *gpu(index).backend; }

}  // namespace tandem::cuda
#endif
