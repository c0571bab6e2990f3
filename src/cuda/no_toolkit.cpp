// cuda/device_api.h in a build without a CUDA toolkit: no GPU, and the reason; the kernels are
// never reached (nothing registers the CUDA device).
#ifndef TANDEM_WITH_CUDA
#include "cuda/device_api.h"

namespace tandem::cuda::api {
namespace {
constexpr int kNoToolkit = -1;
}

bool built_with_cuda() { return false; }
const char* error_text(int) {
  return "this build of Tandem has no CUDA device (configured without a CUDA toolkit: nvcc was not found)";
}
int device_count(int* count) {
  *count = 0;
  return kNoToolkit;
}
int device_properties(int, char*, size_t, int*, int*, size_t*) { return kNoToolkit; }
int set_device(int) { return kNoToolkit; }
int driver_version(int*) { return kNoToolkit; }
int memory_info(size_t*, size_t*) { return kNoToolkit; }
int synchronize_device() { return kNoToolkit; }
int allocate(void**, size_t) { return kNoToolkit; }
bool out_of_memory(int) { return false; }
int release(void*) { return kNoToolkit; }
int allocate_pinned(void**, size_t) { return kNoToolkit; }
int release_pinned(void*) { return kNoToolkit; }
int create_stream(void**) { return kNoToolkit; }
int destroy_stream(void*) { return kNoToolkit; }
int synchronize_stream(void*) { return kNoToolkit; }
int record_event(void**, void*) { return kNoToolkit; }
int event_done(void*, bool*) { return kNoToolkit; }
int destroy_event(void*) { return kNoToolkit; }
int stream_wait_event(void*, void*) { return kNoToolkit; }
int copy_async(void*, const void*, size_t, void*) { return kNoToolkit; }
int blas_create(void**, void*) { return kNoToolkit; }
int blas_destroy(void*) { return kNoToolkit; }
int blas_set_tf32(void*, bool) { return kNoToolkit; }
int blas_set_workspace(void*, void*, size_t) { return kNoToolkit; }
int blas_sgemm(void*, bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
               float*, int64_t) {
  return kNoToolkit;
}
int blas_gemm_bf16(void*, bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*,
                   int64_t, float, float*, int64_t) {
  return kNoToolkit;
}

}  // namespace tandem::cuda::api
#endif
