#pragma once
// A second device for tests of the device seam: memory emulated in host memory that the host may
// not read directly (Tensor::data fails on its tensors, as it would on a GPU's), and a backend
// that counts its calls and runs the CPU's kernels.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/device_memory.h"
#include "kernels/backend.h"

namespace tandem::testing {

inline const Device kEmulated{Device::Kind::Emulated, 0};

class EmulatedMemory : public core::DeviceMemory {
 public:
  void* allocate(Device, size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(Device, void* pointer, size_t) override { std::free(pointer); }
  void to_host(Device, void* host, const void* device, size_t bytes) override {
    ++to_host_calls;
    std::memcpy(host, device, bytes);
  }
  void from_host(Device, void* device, const void* host, size_t bytes) override {
    ++from_host_calls;
    std::memcpy(device, host, bytes);
  }
  bool host_accessible() const override { return false; }
  // On the device itself, as a GPU does them (no host transfer counted).
  void copy_within(Device, void* to, Device, const void* from, size_t bytes) override { std::memmove(to, from, bytes); }
  void fill(Device, void* to, const void* pattern, size_t pattern_bytes, size_t count) override {
    for (size_t i = 0; i < count; ++i) std::memcpy(static_cast<char*>(to) + i * pattern_bytes, pattern, pattern_bytes);
  }
  // Transfers between the host and the device so far (replicas on several threads count them).
  std::atomic<int64_t> to_host_calls = 0, from_host_calls = 0;
};

// Every family forwards to the CPU's kernels and counts the call.
class CountingBackend : public kernels::Backend {
 public:
  std::atomic<int> calls = 0;
  std::string name() const override { return "emulated"; }
  kernels::Backend& cpu() {
    ++calls;
    return kernels::cpu_backend();
  }
  void unary(kernels::UnaryKind k, const float* x, float* y, int64_t n, float f, float lo, float hi) override {
    cpu().unary(k, x, y, n, f, lo, hi);
  }
  void unary_backward(kernels::UnaryKind k, const float* x, const float* dy, float* dx, int64_t n, float f, float lo,
                      float hi) override {
    cpu().unary_backward(k, x, dy, dx, n, f, lo, hi);
  }
  void binary(kernels::BinaryKind k, const float* a, const float* b, float* y, int64_t n, int64_t b_n) override {
    cpu().binary(k, a, b, y, n, b_n);
  }
  double sum(const float* x, int64_t n) override { return cpu().sum(x, n); }
  void dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per, float rate, uint64_t seed,
               uint64_t step, int64_t offset, int64_t features, int64_t feature_offset) override {
    cpu().dropout(x, y, mask, rows, per, rate, seed, step, offset, features, feature_offset);
  }
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) override {
    cpu().gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    cpu().gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  bool has_bf16_products() override { return cpu().has_bf16_products(); }
  void round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y) override {
    cpu().round_bf16(x, ld, rows, cols, y);
  }
  void gemm_bf16_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                         float* c, int64_t ldc) override {
    cpu().gemm_bf16_rounded(ta, tb, m, n, k, a, b, c, ldc);
  }
  void gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                       bool add, float* c, int64_t ldc) override {
    cpu().gemm_tn_ordered(m, n, k, a, lda, b, ldb, add, c, ldc);
  }
  void gemm_ordered(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float* c, int64_t ldc) override {
    cpu().gemm_ordered(tb, m, n, k, a, lda, b, ldb, c, ldc);
  }
  bool ordered_products_vectorised() override { return cpu().ordered_products_vectorised(); }
  void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) override {
    cpu().bias_activation(y, bias, rows, cols, act);
  }
  void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols,
                           Activation act) override {
    cpu().activation_backward(dy, z, y, dz, rows, cols, act);
  }
  void copy_blocks(const float* x, float* y, int64_t blocks, int64_t rows, int64_t width, int64_t x_block,
                   int64_t x_row, int64_t y_block, int64_t y_row) override {
    cpu().copy_blocks(x, y, blocks, rows, width, x_block, x_row, y_block, y_row);
  }
  void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) override {
    cpu().column_sums(dy, rows, cols, db);
  }
  void sparse_softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, float* loss,
                                    float* p) override {
    cpu().sparse_softmax_cross_entropy(logits, labels, rows, cols, loss, p);
  }
  void softmax_cross_entropy(const float* logits, const float* targets, int64_t rows, int64_t cols, float* loss,
                             float* p) override {
    cpu().softmax_cross_entropy(logits, targets, rows, cols, loss, p);
  }
  void cross_entropy_backward(const float* p, const int32_t* labels, const float* targets, const float* dy, float* dx,
                              int64_t rows, int64_t cols) override {
    cpu().cross_entropy_backward(p, labels, targets, dy, dx, rows, cols);
  }
  void pointwise_loss(kernels::PointwiseLoss k, const float* p, const float* t, float* loss, int64_t rows,
                      int64_t per_row) override {
    cpu().pointwise_loss(k, p, t, loss, rows, per_row);
  }
  void pointwise_loss_backward(kernels::PointwiseLoss k, const float* p, const float* t, const float* dy, float* dp,
                               int64_t rows, int64_t per_row) override {
    cpu().pointwise_loss_backward(k, p, t, dy, dp, rows, per_row);
  }
  void channel_sums(const float* x, int64_t rows, int64_t c, double* sums) override {
    cpu().channel_sums(x, rows, c, sums);
  }
  void squared_deviations(const float* x, const float* mean, int64_t rows, int64_t c, double* sums) override {
    cpu().squared_deviations(x, mean, rows, c, sums);
  }
  void batch_norm_backward_sums(const float* dy, const float* x_hat, int64_t rows, int64_t c, double* sums) override {
    cpu().batch_norm_backward_sums(dy, x_hat, rows, c, sums);
  }
  void batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                            float* x_hat, float* y, int64_t rows, int64_t c) override {
    cpu().batch_norm_normalize(x, mean, rstd, gamma, beta, x_hat, y, rows, c);
  }
  void batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                                 const double* sums, double n, float* dx, int64_t rows, int64_t c) override {
    cpu().batch_norm_input_gradient(dy, x_hat, gamma, rstd, sums, n, dx, rows, c);
  }
  void scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n,
                         int64_t c) override {
    cpu().scale_by_channels(dy, gamma, rstd, dx, n, c);
  }
  void moving_average(float* moving, const float* value, int64_t n, float momentum) override {
    cpu().moving_average(moving, value, n, momentum);
  }
  void conv2d_forward(const kernels::Conv2dShape& s, const float* x, const float* k, const float* b,
                      float* y) override {
    cpu().conv2d_forward(s, x, k, b, y);
  }
  void conv2d_backward_data(const kernels::Conv2dShape& s, const float* dy, const float* k, float* dx) override {
    cpu().conv2d_backward_data(s, dy, k, dx);
  }
  void conv2d_backward_weights(const kernels::Conv2dShape& s, const float* x, const float* dy, float* dk,
                               float* db) override {
    cpu().conv2d_backward_weights(s, x, dy, dk, db);
  }
  size_t pool2d_workspace_bytes(const kernels::Pool2dShape& s) override { return cpu().pool2d_workspace_bytes(s); }
  void pool2d_forward(const kernels::Pool2dShape& s, const float* x, float* y, void* ws) override {
    cpu().pool2d_forward(s, x, y, ws);
  }
  void pool2d_backward(const kernels::Pool2dShape& s, const float* dy, const void* ws, float* dx) override {
    cpu().pool2d_backward(s, dy, ws, dx);
  }
  void conv2d_max_pool2d_forward(const kernels::Conv2dShape& conv, const kernels::Pool2dShape& pool, const float* x,
                                 const float* k, const float* b, float* p, void* ws) override {
    cpu().conv2d_max_pool2d_forward(conv, pool, x, k, b, p, ws);
  }
  void conv2d_max_pool2d_backward(const kernels::Conv2dShape& conv, const kernels::Pool2dShape& pool, const float* x,
                                  const float* k, const float* p, const void* ws, const float* dp, float* dx, float* dk,
                                  float* db) override {
    cpu().conv2d_max_pool2d_backward(conv, pool, x, k, p, ws, dp, dx, dk, db);
  }
  void sgd_update(float* w, const float* g, float* v, int64_t n, float lr, float momentum, bool nesterov) override {
    cpu().sgd_update(w, g, v, n, lr, momentum, nesterov);
  }
  void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                   int64_t step) override {
    cpu().adam_update(w, g, m, v, n, lr, b1, b2, eps, step);
  }
  void rmsprop_update(float* w, const float* g, float* ms, float* v, int64_t n, float lr, float rho, float momentum,
                      float eps) override {
    cpu().rmsprop_update(w, g, ms, v, n, lr, rho, momentum, eps);
  }
  void adagrad_update(float* w, const float* g, float* acc, int64_t n, float lr, float eps) override {
    cpu().adagrad_update(w, g, acc, n, lr, eps);
  }
};

// While alive, the emulated device is registered (its memory in core, its backend in kernels).
class EmulatedDevice {
 public:
  EmulatedDevice() {
    core::register_device_memory(Device::Kind::Emulated, &memory);
    kernels::register_backend(Device::Kind::Emulated, &backend);
  }
  ~EmulatedDevice() {
    kernels::register_backend(Device::Kind::Emulated, static_cast<kernels::Backend*>(nullptr));
    core::register_device_memory(Device::Kind::Emulated, nullptr);
  }
  EmulatedDevice(const EmulatedDevice&) = delete;
  EmulatedDevice& operator=(const EmulatedDevice&) = delete;
  CountingBackend backend;
  EmulatedMemory memory;
};

}  // namespace tandem::testing
