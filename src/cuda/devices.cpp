// include/tandem/cuda.h: which GPUs there are, and the CUDA device's registration with core and
// the kernels (a build without a CUDA toolkit registers nothing and says why there is no GPU).
#include "tandem/cuda.h"

#include <atomic>
#include <mutex>

#include "core/device_memory.h"
#include "cuda/device_api.h"
#include "kernels/backend.h"
#include "tandem/error.h"

#ifdef TANDEM_WITH_CUDA
#include "cuda/gpu.h"
#endif

namespace tandem::cuda {

bool built() { return api::built_with_cuda(); }

int device_count() {
  int count = 0;
  return api::device_count(&count) == 0 ? count : 0;
}

std::string why_none() {
  int count = 0;
  int code = api::device_count(&count);
  if (code != 0) return api::error_text(code);
  return count == 0 ? "the CUDA runtime sees no GPU" : "";
}

std::vector<GpuInfo> devices() {
  std::vector<GpuInfo> out;
  for (int i = 0, n = device_count(); i < n; ++i) {
    char name[256];
    GpuInfo info;
    info.index = i;
    int code = api::device_properties(i, name, sizeof name, &info.major, &info.minor, &info.memory);
    if (code != 0) fail("CUDA: cudaGetDeviceProperties({}): {}", i, api::error_text(code));
    info.name = name;
    out.push_back(info);
  }
  return out;
}

MemoryStats memory_stats(int index) {
  MemoryStats out;
#ifdef TANDEM_WITH_CUDA
  if (Gpu* g = gpu_if_made(index)) {
    core::CachingAllocatorStats s = g->allocator.stats();
    out = {s.device_allocations, s.device_releases, s.reused, s.bytes_in_use, s.bytes_cached, s.peak_bytes_in_use};
  }
#endif
  return out;
}

void synchronize(int index) {
#ifdef TANDEM_WITH_CUDA
  Gpu& g = gpu(index);
  g.use();
  check(api::synchronize_stream(g.stream), "the work queued on cuda:{}", index);
#else
  fail("cuda::synchronize({}): {}", index, why_none());
#endif
}

namespace {
std::atomic<bool> tf32{false};
}
void enable_tensor_float_32(bool enabled) { tf32.store(enabled, std::memory_order_relaxed); }
bool tensor_float_32_enabled() { return tf32.load(std::memory_order_relaxed); }

bool registered() {
#ifdef TANDEM_WITH_CUDA
  static std::once_flag once;
  std::call_once(once, [] {
    core::register_device_memory(Device::Kind::CUDA, &memory());
    kernels::register_backend(Device::Kind::CUDA, &backend);
  });
  return true;
#else
  return false;
#endif
}

}  // namespace tandem::cuda
