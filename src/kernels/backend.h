#pragma once
// The kernels of one device, on raw contiguous row-major buffers in that device's memory (the
// addresses Tensor::buffer gives); contracts as in kernels/cpu/kernels.h. Ops reach them through
// their tensors' device, backend(device), so a device is added by registering a backend here and
// its memory in core (core/device_memory.h), without touching the ops. The CPU's backend is
// oneDNN and the vectorized loops of kernels/cpu.
#include <string>

#include "kernels/shapes.h"
#include "tandem/tensor.h"

namespace tandem::kernels {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Elementwise families, sums (the value comes back to the host) and dropout masks.
  virtual void unary(UnaryKind kind, const float* x, float* y, int64_t n, float factor, float low, float high) = 0;
  virtual void unary_backward(UnaryKind kind, const float* x, const float* dy, float* dx, int64_t n, float factor,
                              float low, float high) = 0;
  virtual void binary(BinaryKind kind, const float* a, const float* b, float* y, int64_t n, int64_t b_n) = 0;
  virtual double sum(const float* x, int64_t n) = 0;
  // `blocks` blocks of `rows` rows of `width` floats each: row r of block b is read at
  // x + b·x_block + r·x_row and written at y + b·y_block + r·y_row (a concatenation's or a
  // padding's places, and their gradients' slices back). x and y do not overlap.
  virtual void copy_blocks(const float* x, float* y, int64_t blocks, int64_t rows, int64_t width, int64_t x_block,
                           int64_t x_row, int64_t y_block, int64_t y_row) = 0;
  // Row i's elements draw Philox(seed, step) at (sample_offset + i)·features + feature_offset + j.
  virtual void dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per_sample, float rate,
                       uint64_t seed, uint64_t step, int64_t sample_offset, int64_t features,
                       int64_t feature_offset) = 0;

  // Matrix products, bias and activations.
  virtual void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) = 0;
  // gemm with bf16 products and float32 accumulation (mixed precision), where has_bf16_products().
  virtual void gemm_bf16(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                         int64_t ldc) = 0;
  virtual bool has_bf16_products() = 0;
  // The same on operands rounded once by round_bf16 (kernels/cpu/kernels.h: round_matrix_to_bf16,
  // gemm_bf16_rounded), for a product whose operands another product reuses.
  virtual void round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y) = 0;
  virtual void gemm_bf16_rounded(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                                 const uint16_t* b, float* c, int64_t ldc) = 0;
  // C (+)= Aᵀ·B, each element's sum in k order whatever the shapes (cpu/kernels.h: gemm_tn_ordered).
  virtual void gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                               int64_t ldb, bool add, float* c, int64_t ldc) = 0;
  // C = A·op(B), each element's sum in k order whatever the shapes (cpu/kernels.h: gemm_ordered).
  virtual void gemm_ordered(bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                            const float* b, int64_t ldb, float* c, int64_t ldc) = 0;
  virtual bool ordered_products_vectorised() = 0;
  virtual void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) = 0;
  virtual void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows,
                                   int64_t cols, Activation act) = 0;
  virtual void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) = 0;

  // Fused softmax and cross-entropy.
  virtual void sparse_softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                                            float* loss, float* probabilities) = 0;
  virtual void softmax_cross_entropy(const float* logits, const float* targets, int64_t rows, int64_t cols, float* loss,
                                     float* probabilities) = 0;
  virtual void cross_entropy_backward(const float* probabilities, const int32_t* labels, const float* targets,
                                      const float* dy, float* dlogits, int64_t rows, int64_t cols) = 0;

  // Per-row mean squared error and binary cross-entropy, and their gradients.
  virtual void pointwise_loss(PointwiseLoss kind, const float* pred, const float* target, float* loss, int64_t rows,
                              int64_t per_row) = 0;
  virtual void pointwise_loss_backward(PointwiseLoss kind, const float* pred, const float* target, const float* dy,
                                       float* dpred, int64_t rows, int64_t per_row) = 0;

  // Batch normalization (contracts in kernels/cpu/kernels.h; the double sums go to host memory).
  virtual void channel_sums(const float* x, int64_t rows, int64_t c, double* sums) = 0;
  virtual void squared_deviations(const float* x, const float* mean, int64_t rows, int64_t c, double* sums) = 0;
  virtual void batch_norm_backward_sums(const float* dy, const float* x_hat, int64_t rows, int64_t c, double* sums) = 0;
  virtual void batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma,
                                    const float* beta, float* x_hat, float* y, int64_t rows, int64_t c) = 0;
  virtual void batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                                         const double* sums, double n, float* dx, int64_t rows, int64_t c) = 0;
  virtual void scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n,
                                 int64_t c) = 0;
  virtual void moving_average(float* moving, const float* value, int64_t n, float momentum) = 0;

  // Convolution and pooling.
  virtual void conv2d_forward(const Conv2dShape& s, const float* x, const float* kernel, const float* bias,
                              float* y) = 0;
  virtual void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* kernel, float* dx) = 0;
  virtual void conv2d_backward_weights(const Conv2dShape& s, const float* x, const float* dy, float* dkernel,
                                       float* dbias) = 0;
  virtual size_t pool2d_workspace_bytes(const Pool2dShape& s) = 0;
  virtual void pool2d_forward(const Pool2dShape& s, const float* x, float* y, void* workspace) = 0;
  virtual void pool2d_backward(const Pool2dShape& s, const float* dy, const void* workspace, float* dx) = 0;
  virtual void conv2d_max_pool2d_forward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x,
                                         const float* kernel, const float* bias, float* p, void* workspace) = 0;
  virtual void conv2d_max_pool2d_backward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x,
                                          const float* kernel, const float* p, const void* workspace, const float* dp,
                                          float* dx, float* dkernel, float* dbias) = 0;

  // Optimizer updates, element by element.
  virtual void sgd_update(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum,
                          bool nesterov) = 0;
  virtual void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                           float epsilon, int64_t step) = 0;
  virtual void rmsprop_update(float* w, const float* g, float* mean_square, float* velocity, int64_t n, float lr,
                              float rho, float momentum, float epsilon) = 0;
  virtual void adagrad_update(float* w, const float* g, float* accumulator, int64_t n, float lr, float epsilon) = 0;
};

Backend& cpu_backend();
// Registers (or with null removes) the backend of a device kind other than the CPU: one for all
// its devices, or one per device (a GPU's, with its own stream and handles) that of_device gives.
void register_backend(Device::Kind kind, Backend* backend);
using BackendOfDevice = Backend& (*)(int index);
void register_backend(Device::Kind kind, BackendOfDevice of_device);
// The backend of a registered device kind; fails naming the device when there is none.
Backend& registered_backend(Device device);
inline Backend& backend(Device device) {
  return device.kind == Device::Kind::CPU ? cpu_backend() : registered_backend(device);
}

}  // namespace tandem::kernels
