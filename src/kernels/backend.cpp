// The backends by device kind, and the CPU's: each family forwards to kernels/cpu.
#include "kernels/backend.h"

#include <array>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "tandem/error.h"

namespace tandem::kernels {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  void unary(UnaryKind kind, const float* x, float* y, int64_t n, float factor, float low, float high) override {
    cpu::unary(kind, x, y, n, factor, low, high);
  }
  void unary_backward(UnaryKind kind, const float* x, const float* dy, float* dx, int64_t n, float factor, float low,
                      float high) override {
    cpu::unary_backward(kind, x, dy, dx, n, factor, low, high);
  }
  void binary(BinaryKind kind, const float* a, const float* b, float* y, int64_t n, int64_t b_n) override {
    cpu::binary(kind, a, b, y, n, b_n);
  }
  double sum(const float* x, int64_t n) override { return cpu::sum(x, n); }
  void dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per_sample, float rate, uint64_t seed,
               uint64_t step, int64_t sample_offset, int64_t features, int64_t feature_offset) override {
    cpu::dropout(x, y, mask, rows, per_sample, rate, seed, step, sample_offset, features, feature_offset);
  }
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) override {
    cpu::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    cpu::gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  bool has_bf16_products() override { return cpu::bf16_products_native(); }
  void round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y) override {
    cpu::round_matrix_to_bf16(x, ld, rows, cols, y);
  }
  void gemm_bf16_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                         float* c, int64_t ldc) override {
    cpu::gemm_bf16_rounded(ta, tb, m, n, k, 1.0f, a, b, 0.0f, c, ldc);
  }
  void gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                       bool add, float* c, int64_t ldc) override {
    cpu::gemm_tn_ordered(m, n, k, a, lda, b, ldb, add, c, ldc);
  }
  void gemm_ordered(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float* c, int64_t ldc) override {
    cpu::gemm_ordered(tb, m, n, k, a, lda, b, ldb, c, ldc);
  }
  bool ordered_products_vectorised() override { return cpu::ordered_products_vectorised(); }
  void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) override {
    cpu::bias_activation(y, bias, rows, cols, act);
  }
  void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols,
                           Activation act) override {
    cpu::activation_backward(dy, z, y, dz, rows, cols, act);
  }
  void copy_blocks(const float* x, float* y, int64_t blocks, int64_t rows, int64_t width, int64_t x_block,
                   int64_t x_row, int64_t y_block, int64_t y_row) override {
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(y + b * y_block + r * y_row, x + b * x_block + r * x_row,
                    static_cast<size_t>(width) * sizeof(float));
  }
  void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) override {
    cpu::column_sums(dy, rows, cols, db);
  }
  void sparse_softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, float* loss,
                                    float* probabilities) override {
    cpu::sparse_softmax_cross_entropy(logits, labels, rows, cols, loss, probabilities);
  }
  void softmax_cross_entropy(const float* logits, const float* targets, int64_t rows, int64_t cols, float* loss,
                             float* probabilities) override {
    cpu::softmax_cross_entropy(logits, targets, rows, cols, loss, probabilities);
  }
  void cross_entropy_backward(const float* p, const int32_t* labels, const float* targets, const float* dy, float* dx,
                              int64_t rows, int64_t cols) override {
    cpu::cross_entropy_backward(p, labels, targets, dy, dx, rows, cols);
  }
  void pointwise_loss(PointwiseLoss kind, const float* pred, const float* target, float* loss, int64_t rows,
                      int64_t per_row) override {
    cpu::pointwise_loss(kind, pred, target, loss, rows, per_row);
  }
  void pointwise_loss_backward(PointwiseLoss kind, const float* pred, const float* target, const float* dy,
                               float* dpred, int64_t rows, int64_t per_row) override {
    cpu::pointwise_loss_backward(kind, pred, target, dy, dpred, rows, per_row);
  }
  void channel_sums(const float* x, int64_t rows, int64_t c, double* sums) override {
    cpu::channel_sums(x, rows, c, sums);
  }
  void squared_deviations(const float* x, const float* mean, int64_t rows, int64_t c, double* sums) override {
    cpu::squared_deviations(x, mean, rows, c, sums);
  }
  void batch_norm_backward_sums(const float* dy, const float* x_hat, int64_t rows, int64_t c, double* sums) override {
    cpu::batch_norm_backward_sums(dy, x_hat, rows, c, sums);
  }
  void batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                            float* x_hat, float* y, int64_t rows, int64_t c) override {
    cpu::batch_norm_normalize(x, mean, rstd, gamma, beta, x_hat, y, rows, c);
  }
  void batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                                 const double* sums, double n, float* dx, int64_t rows, int64_t c) override {
    cpu::batch_norm_input_gradient(dy, x_hat, gamma, rstd, sums, n, dx, rows, c);
  }
  void scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n,
                         int64_t c) override {
    cpu::scale_by_channels(dy, gamma, rstd, dx, n, c);
  }
  void moving_average(float* moving, const float* value, int64_t n, float momentum) override {
    cpu::moving_average(moving, value, n, momentum);
  }
  void conv2d_forward(const Conv2dShape& s, const float* x, const float* kernel, const float* bias, float* y) override {
    cpu::conv2d_forward(s, x, kernel, bias, y);
  }
  void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* kernel, float* dx) override {
    cpu::conv2d_backward_data(s, dy, kernel, dx);
  }
  void conv2d_backward_weights(const Conv2dShape& s, const float* x, const float* dy, float* dkernel,
                               float* dbias) override {
    cpu::conv2d_backward_weights(s, x, dy, dkernel, dbias);
  }
  size_t pool2d_workspace_bytes(const Pool2dShape& s) override { return cpu::pool2d_workspace_bytes(s); }
  void pool2d_forward(const Pool2dShape& s, const float* x, float* y, void* workspace) override {
    cpu::pool2d_forward(s, x, y, workspace);
  }
  void pool2d_backward(const Pool2dShape& s, const float* dy, const void* workspace, float* dx) override {
    cpu::pool2d_backward(s, dy, workspace, dx);
  }
  void conv2d_max_pool2d_forward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x, const float* kernel,
                                 const float* bias, float* p, void* workspace) override {
    cpu::conv2d_max_pool2d_forward(conv, pool, x, kernel, bias, p, workspace);
  }
  void conv2d_max_pool2d_backward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x, const float* kernel,
                                  const float* p, const void* workspace, const float* dp, float* dx, float* dkernel,
                                  float* dbias) override {
    cpu::conv2d_max_pool2d_backward(conv, pool, x, kernel, p, workspace, dp, dx, dkernel, dbias);
  }
  void sgd_update(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum,
                  bool nesterov) override {
    cpu::sgd_update(w, g, velocity, n, lr, momentum, nesterov);
  }
  void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                   float epsilon, int64_t step) override {
    cpu::adam_update(w, g, m, v, n, lr, beta1, beta2, epsilon, step);
  }
  void rmsprop_update(float* w, const float* g, float* mean_square, float* velocity, int64_t n, float lr, float rho,
                      float momentum, float epsilon) override {
    cpu::rmsprop_update(w, g, mean_square, velocity, n, lr, rho, momentum, epsilon);
  }
  void adagrad_update(float* w, const float* g, float* accumulator, int64_t n, float lr, float epsilon) override {
    cpu::adagrad_update(w, g, accumulator, n, lr, epsilon);
  }
};

CpuBackend cpu_instance;
std::array<Backend*, 3> registered{};
std::array<BackendOfDevice, 3> registered_of_device{};

}  // namespace

Backend& cpu_backend() { return cpu_instance; }

void register_backend(Device::Kind kind, Backend* backend) {
  if (kind == Device::Kind::CPU) fail("register_backend: the cpu's backend is built in");
  registered[static_cast<size_t>(kind)] = backend;
  registered_of_device[static_cast<size_t>(kind)] = nullptr;
}
void register_backend(Device::Kind kind, BackendOfDevice of_device) {
  if (kind == Device::Kind::CPU) fail("register_backend: the cpu's backend is built in");
  registered_of_device[static_cast<size_t>(kind)] = of_device;
  registered[static_cast<size_t>(kind)] = nullptr;
}

Backend& registered_backend(Device device) {
  if (BackendOfDevice of_device = registered_of_device[static_cast<size_t>(device.kind)])
    return of_device(device.index);
  Backend* b = registered[static_cast<size_t>(device.kind)];
  if (b == nullptr) fail("no kernels are registered for device {} (this build has cpu)", device.name());
  return *b;
}

}  // namespace tandem::kernels
