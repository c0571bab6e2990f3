// include/tandem/cuda.h: which GPUs there are, and the CUDA device's registration with core and
// the kernels (a build without a CUDA toolkit registers nothing and says why there is no GPU).
#include "tandem/cuda.h"

#include <atomic>
#include <map>
#include <mutex>

#include "core/device_memory.h"
#include "cuda/device_api.h"
#include "cuda/logical.h"
#include "kernels/backend.h"
#include "tandem/error.h"

#ifdef TANDEM_WITH_CUDA
#include "cuda/gpu.h"
#endif

namespace tandem::cuda {

bool built() { return api::built_with_cuda(); }

int physical_device_count() {
  int count = 0;
  return api::device_count(&count) == 0 ? count : 0;
}

namespace {
std::mutex splits_mutex;
std::map<int, std::vector<LogicalGpuOptions>> splits;  // by physical GPU; absent: not split
}  // namespace

void set_logical_devices(int physical, const std::vector<LogicalGpuOptions>& devices) {
  int cards = physical_device_count();
  if (physical < 0 || physical >= cards)
    fail("set_logical_devices: there is no physical GPU {}; {}", physical,
         cards == 0 ? "no GPU can be used here (" + why_none() + ")" : fmt::format("this machine has {}", cards));
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].memory_limit_bytes < 0)
      fail("set_logical_devices: logical device {} of GPU {} has a memory limit of {} bytes; give 0 (none) or more", i,
           physical, devices[i].memory_limit_bytes);
#ifdef TANDEM_WITH_CUDA
  if (any_gpu_made())
    fail(
        "set_logical_devices: a GPU is already in use (a tensor was placed on one); set the logical devices first, "
        "as TensorFlow's must be set before its runtime starts");
#endif
  std::lock_guard lock(splits_mutex);
  if (devices.empty()) splits.erase(physical);
  else splits[physical] = devices;
}

std::vector<LogicalGpuOptions> logical_devices(int physical) {
  std::lock_guard lock(splits_mutex);
  auto it = splits.find(physical);
  return it == splits.end() ? std::vector<LogicalGpuOptions>{} : it->second;
}

std::optional<LogicalGpu> logical_gpu(int index) {
  std::lock_guard lock(splits_mutex);
  for (int p = 0, cards = physical_device_count(); p < cards && index >= 0; ++p) {
    auto it = splits.find(p);
    int here = it == splits.end() ? 1 : static_cast<int>(it->second.size());
    if (index < here)
      return LogicalGpu{p, it == splits.end() ? 0 : it->second[static_cast<size_t>(index)].memory_limit_bytes};
    index -= here;
  }
  return std::nullopt;
}

int device_count() {
  int count = 0;
  while (logical_gpu(count)) ++count;
  return count;
}

std::string why_none() {
  int count = 0;
  int code = api::device_count(&count);
  if (code != 0) return api::error_text(code);
  return count == 0 ? "the CUDA runtime sees no GPU" : "";
}

std::vector<GpuInfo> devices() {
  std::vector<GpuInfo> out;
  for (int i = 0; std::optional<LogicalGpu> logical = logical_gpu(i); ++i) {
    char name[256];
    GpuInfo info;
    info.index = i;
    info.physical = logical->physical;
    int code = api::device_properties(info.physical, name, sizeof name, &info.major, &info.minor, &info.memory);
    if (code != 0) fail("CUDA: cudaGetDeviceProperties({}): {}", info.physical, api::error_text(code));
    if (logical->memory_limit_bytes > 0) info.memory = static_cast<size_t>(logical->memory_limit_bytes);
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
