// The CUDA runtime's and cuBLAS's calls behind cuda/device_api.h (C++17, nvcc).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstring>

#include "cuda/device_api.h"

namespace tandem::cuda::api {
namespace {
int blas(cublasStatus_t status) { return status == CUBLAS_STATUS_SUCCESS ? 0 : kBlasErrorBase + int(status); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cublasHandle_t as_handle(void* h) { return static_cast<cublasHandle_t>(h); }
}  // namespace

bool built_with_cuda() { return true; }

const char* error_text(int code) {
  if (code < kBlasErrorBase) return cudaGetErrorString(static_cast<cudaError_t>(code));
  switch (static_cast<cublasStatus_t>(code - kBlasErrorBase)) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS: not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS: allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "cuBLAS: invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "cuBLAS: the GPU lacks a feature the call needs";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "cuBLAS: execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLAS: not supported";
    default: return "cuBLAS: internal error";
  }
}

int device_count(int* count) {
  *count = 0;
  return static_cast<int>(cudaGetDeviceCount(count));
}
int device_properties(int device, char* name, size_t name_size, int* major, int* minor, size_t* total_memory) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return int(e);
  std::strncpy(name, p.name, name_size - 1);
  name[name_size - 1] = '\0';
  *major = p.major;
  *minor = p.minor;
  *total_memory = p.totalGlobalMem;
  return 0;
}
int set_device(int device) { return int(cudaSetDevice(device)); }
int driver_version(int* version) { return int(cudaDriverGetVersion(version)); }
int memory_info(size_t* free_bytes, size_t* total) { return int(cudaMemGetInfo(free_bytes, total)); }
int synchronize_device() { return int(cudaDeviceSynchronize()); }

int allocate(void** pointer, size_t bytes) {
  cudaError_t e = cudaMalloc(pointer, bytes);
  if (e == cudaErrorMemoryAllocation) cudaGetLastError();  // not sticky: the caller frees its cache and tries again
  return int(e);
}
bool out_of_memory(int code) { return code == int(cudaErrorMemoryAllocation); }
int release(void* pointer) { return int(cudaFree(pointer)); }
int allocate_pinned(void** pointer, size_t bytes) { return int(cudaMallocHost(pointer, bytes)); }
int release_pinned(void* pointer) { return int(cudaFreeHost(pointer)); }

int create_stream(void** stream) {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = s;
  return int(e);
}
int destroy_stream(void* stream) { return int(cudaStreamDestroy(as_stream(stream))); }
int synchronize_stream(void* stream) { return int(cudaStreamSynchronize(as_stream(stream))); }
int record_event(void** event, void* stream) {
  cudaEvent_t e = nullptr;
  cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (r != cudaSuccess) return int(r);
  *event = e;
  return int(cudaEventRecord(e, as_stream(stream)));
}
int event_done(void* event, bool* done) {
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  *done = e == cudaSuccess;
  return e == cudaSuccess || e == cudaErrorNotReady ? 0 : int(e);
}
int destroy_event(void* event) { return int(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }
int stream_wait_event(void* stream, void* event) {
  return int(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0));
}
int copy_async(void* to, const void* from, size_t bytes, void* stream) {
  return int(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, as_stream(stream)));
}

int blas_create(void** handle, void* stream) {
  cublasHandle_t h = nullptr;
  int r = blas(cublasCreate(&h));
  if (r != 0) return r;
  *handle = h;
  if ((r = blas(cublasSetStream(h, as_stream(stream)))) != 0) return r;
  // Float32 products in float32 (TF32 off), as the CPU computes them.
  return blas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
}
int blas_destroy(void* handle) { return blas(cublasDestroy(as_handle(handle))); }
int blas_set_tf32(void* handle, bool on) {
  return blas(cublasSetMathMode(as_handle(handle), on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}
int blas_set_workspace(void* handle, void* workspace, size_t bytes) {
  return blas(cublasSetWorkspace(as_handle(handle), workspace, bytes));
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS gets B first.
int blas_sgemm(void* handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return blas(cublasSgemm(as_handle(handle), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &alpha, b, int(ldb), a,
                          int(lda), &beta, c, int(ldc)));
}
int blas_gemm_bf16(void* handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return blas(cublasGemmEx(as_handle(handle), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &alpha, b, CUDA_R_16BF,
                           int(ldb), a, CUDA_R_16BF, int(lda), &beta, c, CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
}

}  // namespace tandem::cuda::api
