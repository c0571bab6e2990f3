#pragma once
// The narrow header between the CUDA device (src/cuda/*.cpp, C++20) and what nvcc compiles
// (src/cuda/*.cu, C++17): the CUDA runtime's and cuBLAS's calls Tandem makes and the launchers of
// its kernels, in plain types. Every call returns 0 or the CUDA (or cuBLAS, offset by
// kBlasErrorBase) error code, which error_text names; the C++20 side turns it into a
// tandem::Error that says what was being done. A stream or an event is a `void*` (cudaStream_t,
// cudaEvent_t). In a build without a CUDA toolkit, the same calls exist (no_toolkit.cpp) and
// device_count answers 0 with the reason.
//
// Kernel arguments are device addresses on the current device, except where a name says `host`.
// Launchers queue their work on `stream` and do not wait for it.
#include <stddef.h>
#include <stdint.h>

namespace tandem::cuda::api {

constexpr int kBlasErrorBase = 100000;

// Whether this build has the CUDA runtime (built with a toolkit).
bool built_with_cuda();
const char* error_text(int code);
// GPUs the runtime sees; 0 with `reason` (a static string) set when none can be used.
int device_count(int* count);
int device_properties(int device, char* name, size_t name_size, int* major, int* minor, size_t* total_memory);
int set_device(int device);
int driver_version(int* version);                    // cudaDriverGetVersion: 13000 for 13.0
int memory_info(size_t* free_bytes, size_t* total);  // cudaMemGetInfo on the current device
int synchronize_device();

int allocate(void** pointer, size_t bytes);  // cudaMalloc
bool out_of_memory(int code);                // allocate's answer when the GPU has no room
int release(void* pointer);                  // cudaFree
int allocate_pinned(void** pointer, size_t bytes);
int release_pinned(void* pointer);

int create_stream(void** stream);  // non-blocking with respect to the legacy default stream
int destroy_stream(void* stream);
int synchronize_stream(void* stream);
int record_event(void** event, void* stream);  // a new event, recorded on stream
int event_done(void* event, bool* done);
int destroy_event(void* event);
int stream_wait_event(void* stream, void* event);

// Bytes between any two places (host or device, by unified addressing), queued on stream.
int copy_async(void* to, const void* from, size_t bytes, void* stream);

// cuBLAS: a handle bound to a stream, TF32 off (CUBLAS_DEFAULT_MATH).
int blas_create(void** handle, void* stream);
int blas_destroy(void* handle);
// Float32 products on TF32 tensor cores (on) or in float32 (off).
int blas_set_tf32(void* handle, bool on);
// The handle's workspace: cuBLAS then allocates none of its own.
int blas_set_workspace(void* handle, void* workspace, size_t bytes);
// Row-major C(m × n) = alpha·op(A)·op(B) + beta·C, as kernels::cpu::gemm.
int blas_sgemm(void* handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same on bf16 operands (the upper halves of float32s), float32 accumulation and C.
int blas_gemm_bf16(void* handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace tandem::cuda::api

// The kernels (kernels.cu, conv.cu): contracts as kernels/cpu/kernels.h's functions of the same
// names; enums as the numbers of kernels/elements.h.
namespace tandem::cuda::launch {

int fill(void* to, const void* pattern, size_t pattern_bytes, size_t count, void* stream);
int unary(int kind, const float* x, float* y, int64_t n, float factor, float low, float high, void* stream);
int unary_backward(int kind, const float* x, const float* dy, float* dx, int64_t n, float factor, float low, float high,
                   void* stream);
int binary(int kind, const float* a, const float* b, float* y, int64_t n, int64_t b_n, void* stream);
// Σ x in double into *device_sum (one double of device memory), in a fixed order.
int sum(const float* x, int64_t n, double* device_sum, void* stream);
int dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per_sample, float rate, uint64_t seed,
            uint64_t step, int64_t sample_offset, int64_t features, int64_t feature_offset, void* stream);
int round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y, void* stream);
// C (+)= Aᵀ·B and C = A·op(B), each element one fma chain over k in order from zero.
int gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, bool add,
                    float* c, int64_t ldc, void* stream);
int gemm_ordered(bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc, void* stream);
int bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, int act, void* stream);
int activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols, int act,
                        void* stream);
// Column sums (a bias's gradient), in a tree fixed by the shape: `workspace` holds
// column_sums_workspace(rows, cols) bytes of device memory (none when it answers 0).
int copy_blocks(const float* x, float* y, int64_t blocks, int64_t rows, int64_t width, int64_t x_block, int64_t x_row,
                int64_t y_block, int64_t y_row, void* stream);
int column_sums(const float* dy, int64_t rows, int64_t cols, float* db, void* workspace, void* stream);
size_t column_sums_workspace(int64_t rows, int64_t cols);
int softmax_cross_entropy(const float* logits, const int32_t* labels, const float* targets, int64_t rows, int64_t cols,
                          float* loss, float* probabilities, void* stream);
int cross_entropy_backward(const float* probabilities, const int32_t* labels, const float* targets, const float* dy,
                           float* dlogits, int64_t rows, int64_t cols, void* stream);
int pointwise_loss(int kind, const float* pred, const float* target, float* loss, int64_t rows, int64_t per_row,
                   void* stream);
int pointwise_loss_backward(int kind, const float* pred, const float* target, const float* dy, float* dpred,
                            int64_t rows, int64_t per_row, void* stream);
// Batch normalization; the double sums into device memory (the caller copies them to the host).
// which: 0 Σx, 1 Σ(x - mean)² (b = mean), 2 Σdy then Σdy·x̂ (a = dy, b = x̂; 2c sums); in the
// tree of column_sums, with channel_sums_workspace(rows, c) bytes of `workspace`.
int channel_sums(int which, const float* a, const float* b, int64_t rows, int64_t c, double* sums, void* workspace,
                 void* stream);
size_t channel_sums_workspace(int64_t rows, int64_t c);
int batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                         float* x_hat, float* y, int64_t rows, int64_t c, void* stream);
// sums: 2c doubles in device memory.
int batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                              const double* sums, double n, float* dx, int64_t rows, int64_t c, void* stream);
int scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n, int64_t c,
                      void* stream);
int moving_average(float* moving, const float* value, int64_t n, float momentum, void* stream);
int sgd_update(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum, bool nesterov,
               void* stream);
int adam_update(float* w, const float* g, float* m, float* v, int64_t n, float alpha, float beta1, float beta2,
                float epsilon, void* stream);
int rmsprop_update(float* w, const float* g, float* mean_square, float* velocity, int64_t n, float lr, float rho,
                   float momentum, float epsilon, void* stream);
int adagrad_update(float* w, const float* g, float* accumulator, int64_t n, float lr, float epsilon, void* stream);

// Convolution (NHWC input, HWIO kernel) and pooling (NHWC), as kernels/shapes.h gives them.
struct Conv {
  int64_t n, h, w, c, kh, kw, f, sh, sw, pad_top, pad_left, oh, ow;
  bool relu;
  bool bf16;  // products of x, the kernel and dy rounded to bf16, float32 sums
};
struct Pool {
  bool max;
  int64_t n, h, w, c, ph, pw, sh, sw, pad_top, pad_left, oh, ow;
};
// A convolution is products of its im2col matrix (kernels/elements.h: a row per output place, a column
// per window place) with the kernel, a pass of images at a time: rows of images first_image …
// + images - 1, into cols (float32) or cols16 (bf16, when not null), packed.
int im2col(const Conv& s, const float* x, int64_t first_image, int64_t images, float* cols, uint16_t* cols16,
           void* stream);
// The input gradient of those images from their im2col matrix's gradient (dcols, packed as im2col's).
int col2im(const Conv& s, const float* dcols, int64_t first_image, int64_t images, float* dx, void* stream);
// Max pooling records where in each output's window its maximum was (py·pw + px, int32) in
// `argmax`; average ignores it.
int pool2d_forward(const Pool& s, const float* x, float* y, int32_t* argmax, void* stream);
int pool2d_backward(const Pool& s, const float* dy, const int32_t* argmax, float* dx, void* stream);
// A pooled output's gradient unpooled onto the ReLU convolution's output: dp where the window's
// maximum was and the pooled value is positive, else 0.
int unpool_relu(const Pool& s, const float* p, const int32_t* argmax, const float* dp, float* dy, void* stream);

}  // namespace tandem::cuda::launch
