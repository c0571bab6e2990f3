#pragma once
// NVIDIA GPUs: Device::cuda(i) (tensor.h) places tensors and ops on GPU i, as Device::cpu() does on
// the host. A build made with a CUDA toolkit (nvcc found when configuring: README.md says which
// versions are known to build) has the CUDA device; without one, or on a machine without a usable
// GPU, device_count() is 0 and why_none() says why.
//
// Memory: a caching, stream-ordered allocator per GPU (what a step frees is handed out again, so
// a steady-state step asks the driver for nothing); one stream per GPU, on which every kernel and
// copy of that GPU is queued in order; the host waits only where a value comes back to it
// (Tensor::to(Device::cpu()), item(), a sum). Products go through cuBLAS with TF32 off (float32
// products as on the CPU) and in bf16 under the mixed_bfloat16 policy.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cuda {

// Whether this build has the CUDA device.
bool built();
// GPUs that can be used, counted as devices cuda:0, cuda:1 ... (logical GPUs, below; 0: none,
// why_none() says why, "" when there are some).
int device_count();
std::string why_none();
// The physical GPUs the CUDA runtime sees (0 without a toolkit or a GPU).
int physical_device_count();

// Logical GPUs (tf.config.set_logical_device_configuration on a GPU): physical GPU `physical`
// split into one device per entry, each with its own stream, cuBLAS handle and caching allocator,
// holding at most memory_limit_bytes of the card (0: no limit of its own), so that strategies of
// several GPUs run, and are tested, on one card. The devices cuda:0, cuda:1 ... are numbered by
// physical GPU, then entry; a GPU not split is one device. Set before any tensor is placed on a
// GPU, as TensorFlow's must be set before its runtime starts; an empty list undoes a split.
struct LogicalGpuOptions {
  int64_t memory_limit_bytes = 0;
};
void set_logical_devices(int physical, const std::vector<LogicalGpuOptions>& devices);
// The split of `physical` (empty: not split).
std::vector<LogicalGpuOptions> logical_devices(int physical);

struct GpuInfo {
  int index = 0;             // cuda:index
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability
  size_t memory = 0;         // bytes: the card's, or a logical device's limit
  int physical = 0;          // the card it is on (its own index where no GPU is split)
};
std::vector<GpuInfo> devices();

// Device::cuda(index)'s allocator, counted since the process started.
struct MemoryStats {
  int64_t device_allocations = 0, device_releases = 0;  // cudaMalloc and cudaFree calls
  int64_t reused = 0;                                   // requests served from the cache
  int64_t bytes_in_use = 0, bytes_cached = 0;
  int64_t peak_bytes_in_use = 0;  // the most handed out at once (torch.cuda.max_memory_allocated)
};
MemoryStats memory_stats(int index);
// Waits until every queued kernel and copy of GPU `index` has run (a timer's fence).
void synchronize(int index);

// Float32 products on the GPUs' TF32 tensor cores (tf.config.experimental.
// enable_tensor_float_32_execution; `tandem fit --tf32`): faster, with operands rounded to 10
// bits of mantissa. Off by default, so that a GPU's results are the CPU's within float32 rounding.
// For the whole process, from the next product on; the CPU's products are float32 either way.
void enable_tensor_float_32(bool enabled);
bool tensor_float_32_enabled();

// Registers the CUDA device's memory and kernels with Tandem's core (once; no CUDA call is made
// until a tensor is placed on a GPU). tandem.h calls it, so that a program including it can use
// Device::cuda(i) with nothing else to do; true when this build has the CUDA device.
bool registered();

}  // namespace tandem::cuda
