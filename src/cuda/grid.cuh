#pragma once
// The grid the CUDA kernels share (C++17, nvcc only): f(i) for every i < n, a thread per index, on
// at most 65,535 blocks of 256 that stride over the rest; queued on `stream`. Returns the
// launch's error code.
#include <cuda_runtime.h>
#include <stdint.h>

namespace tandem::cuda::launch {

constexpr int kThreads = 256;

template <class F>
__global__ void each_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) f(i);
}
template <class F>
int each(int64_t n, void* stream, F f) {
  if (n <= 0) return 0;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  each_kernel<<<unsigned(blocks < 65535 ? blocks : 65535), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, f);
  return int(cudaGetLastError());
}

}  // namespace tandem::cuda::launch
