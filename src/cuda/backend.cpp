// The kernels of one GPU (kernels::Backend): each family queued on the GPU's stream through the
// launchers of kernels.cu and conv.cu, products through cuBLAS. What the contract hands to host
// memory (a sum, batch normalization's double sums) is copied back and waited for. Built with a
// CUDA toolkit only.
#ifdef TANDEM_WITH_CUDA
#include <algorithm>
#include <limits>

#include "cuda/gpu.h"
#include "kernels/elements.h"
#include "tandem/cuda.h"
#include "tandem/error.h"

namespace tandem::cuda {
namespace {

launch::Conv conv_of(const kernels::Conv2dShape& s) {
  return {s.n, s.h, s.w, s.c, s.kh, s.kw, s.f, s.sh, s.sw, s.pad_top, s.pad_left, s.oh, s.ow, s.fused_relu, s.bf16};
}
launch::Pool pool_of(const kernels::Pool2dShape& s) {
  return {
      s.kind == kernels::PoolKind::Max, s.n, s.h, s.w, s.c, s.ph, s.pw, s.sh, s.sw, s.pad_top, s.pad_left, s.oh, s.ow};
}
int as_int(auto e) { return static_cast<int>(e); }

class GpuBackend final : public kernels::Backend {
 public:
  explicit GpuBackend(Gpu& gpu) : g_(gpu) {}
  std::string name() const override { return fmt::format("cuda:{}", g_.index); }

  void unary(kernels::UnaryKind kind, const float* x, float* y, int64_t n, float factor, float low,
             float high) override {
    run(launch::unary(as_int(kind), x, y, n, factor, low, high, s()), "unary");
  }
  void unary_backward(kernels::UnaryKind kind, const float* x, const float* dy, float* dx, int64_t n, float factor,
                      float low, float high) override {
    run(launch::unary_backward(as_int(kind), x, dy, dx, n, factor, low, high, s()), "unary_backward");
  }
  void binary(kernels::BinaryKind kind, const float* a, const float* b, float* y, int64_t n, int64_t b_n) override {
    run(launch::binary(as_int(kind), a, b, y, n, b_n, s()), "binary");
  }
  double sum(const float* x, int64_t n) override {
    Gpu::Scratch total(g_, sizeof(double));
    run(launch::sum(x, n, total.as<double>(), s()), "sum");
    double host = 0.0;
    to_host(&host, total.as<double>(), sizeof host, "sum");
    return host;
  }
  void dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per_sample, float rate, uint64_t seed,
               uint64_t step, int64_t sample_offset, int64_t features, int64_t feature_offset) override {
    run(launch::dropout(x, y, mask, rows, per_sample, rate, seed, step, sample_offset, features, feature_offset, s()),
        "dropout");
  }

  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) override {
    if (m == 0 || n == 0) return;
    if (k == 0) return scale_rows(c, m, n, ldc, beta);  // C = β·C (cuBLAS refuses a leading dimension of 0)
    check_fits_int(m, n, k, std::max({lda, ldb, ldc}));
    use();
    std::lock_guard lock(g_.blas_mutex);
    if (bool tf32 = tensor_float_32_enabled(); tf32 != g_.blas_tf32) {
      check(api::blas_set_tf32(g_.blas, tf32), "cublasSetMathMode on cuda:{}", g_.index);
      g_.blas_tf32 = tf32;
    }
    check(api::blas_sgemm(g_.blas, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc),
          "cublasSgemm {}x{}x{} on cuda:{}", m, n, k, g_.index);
  }
  void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    if (m == 0 || n == 0 || k == 0) return gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    // The operands rounded and packed as stored (A: m × k, or k × m transposed; B: k × n, or n × k).
    Gpu::Scratch a16(g_, static_cast<size_t>(m * k) * 2), b16(g_, static_cast<size_t>(k * n) * 2);
    round_bf16(a, lda, ta ? k : m, ta ? m : k, a16.as<uint16_t>());
    round_bf16(b, ldb, tb ? n : k, tb ? k : n, b16.as<uint16_t>());
    rounded_product(ta, tb, m, n, k, alpha, a16.as<uint16_t>(), b16.as<uint16_t>(), beta, c, ldc);
  }
  bool has_bf16_products() override { return g_.bf16_products; }
  void round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y) override {
    run(launch::round_bf16(x, ld, rows, cols, y, s()), "round_bf16");
  }
  void gemm_bf16_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                         float* c, int64_t ldc) override {
    rounded_product(ta, tb, m, n, k, 1.0f, a, b, 0.0f, c, ldc);
  }
  void gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                       bool add, float* c, int64_t ldc) override {
    run(launch::gemm_tn_ordered(m, n, k, a, lda, b, ldb, add, c, ldc, s()), "gemm_tn_ordered");
  }
  void gemm_ordered(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float* c, int64_t ldc) override {
    run(launch::gemm_ordered(tb, m, n, k, a, lda, b, ldb, c, ldc, s()), "gemm_ordered");
  }
  // A thread per element with its own ordered chain: the fast path here, as vectorised rows are on the CPU.
  bool ordered_products_vectorised() override { return true; }
  void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act) override {
    run(launch::bias_activation(y, bias, rows, cols, as_int(act), s()), "bias_activation");
  }
  void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols,
                           Activation act) override {
    run(launch::activation_backward(dy, z, y, dz, rows, cols, as_int(act), s()), "activation_backward");
  }
  void copy_blocks(const float* x, float* y, int64_t blocks, int64_t rows, int64_t width, int64_t x_block,
                   int64_t x_row, int64_t y_block, int64_t y_row) override {
    run(launch::copy_blocks(x, y, blocks, rows, width, x_block, x_row, y_block, y_row, s()), "copy_blocks");
  }
  void column_sums(const float* dy, int64_t rows, int64_t cols, float* db) override {
    Gpu::Scratch workspace(g_, launch::column_sums_workspace(rows, cols));
    run(launch::column_sums(dy, rows, cols, db, workspace.as<void>(), s()), "column_sums");
  }

  void sparse_softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, float* loss,
                                    float* p) override {
    run(launch::softmax_cross_entropy(logits, labels, nullptr, rows, cols, loss, p, s()), "softmax_cross_entropy");
  }
  void softmax_cross_entropy(const float* logits, const float* targets, int64_t rows, int64_t cols, float* loss,
                             float* p) override {
    run(launch::softmax_cross_entropy(logits, nullptr, targets, rows, cols, loss, p, s()), "softmax_cross_entropy");
  }
  void cross_entropy_backward(const float* p, const int32_t* labels, const float* targets, const float* dy, float* dx,
                              int64_t rows, int64_t cols) override {
    run(launch::cross_entropy_backward(p, labels, targets, dy, dx, rows, cols, s()), "cross_entropy_backward");
  }
  void pointwise_loss(kernels::PointwiseLoss kind, const float* pred, const float* target, float* loss, int64_t rows,
                      int64_t per_row) override {
    run(launch::pointwise_loss(as_int(kind), pred, target, loss, rows, per_row, s()), "pointwise_loss");
  }
  void pointwise_loss_backward(kernels::PointwiseLoss kind, const float* pred, const float* target, const float* dy,
                               float* dpred, int64_t rows, int64_t per_row) override {
    run(launch::pointwise_loss_backward(as_int(kind), pred, target, dy, dpred, rows, per_row, s()),
        "pointwise_loss_backward");
  }

  void channel_sums(const float* x, int64_t rows, int64_t c, double* sums) override {
    host_sums(0, x, nullptr, rows, c, sums);
  }
  void squared_deviations(const float* x, const float* mean, int64_t rows, int64_t c, double* sums) override {
    host_sums(1, x, mean, rows, c, sums);
  }
  void batch_norm_backward_sums(const float* dy, const float* x_hat, int64_t rows, int64_t c, double* sums) override {
    host_sums(2, dy, x_hat, rows, c, sums);
  }
  void batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                            float* x_hat, float* y, int64_t rows, int64_t c) override {
    run(launch::batch_norm_normalize(x, mean, rstd, gamma, beta, x_hat, y, rows, c, s()), "batch_norm_normalize");
  }
  void batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                                 const double* sums, double n, float* dx, int64_t rows, int64_t c) override {
    Gpu::Scratch on_device(g_, static_cast<size_t>(2 * c) * sizeof(double));
    check(api::copy_async(on_device.as<double>(), sums, static_cast<size_t>(2 * c) * sizeof(double), s()),
          "batch normalization's sums to the GPU");
    run(launch::batch_norm_input_gradient(dy, x_hat, gamma, rstd, on_device.as<double>(), n, dx, rows, c, s()),
        "batch_norm_input_gradient");
  }
  void scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n,
                         int64_t c) override {
    run(launch::scale_by_channels(dy, gamma, rstd, dx, n, c, s()), "scale_by_channels");
  }
  void moving_average(float* moving, const float* value, int64_t n, float momentum) override {
    run(launch::moving_average(moving, value, n, momentum, s()), "moving_average");
  }

  // Convolutions as products through cuBLAS (im2col, then the products; dx gathered back from the
  // im2col matrix's gradient), a pass of images at a time so that the matrix stays within
  // kIm2colBytes. Under bf16 the matrix, the kernel and dy are rounded once a call.
  void conv2d_forward(const kernels::Conv2dShape& sh, const float* x, const float* k, const float* b,
                      float* y) override {
    launch::Conv c = conv_of(sh);
    int64_t places = c.oh * c.ow, window = c.kh * c.kw * c.c;
    ConvOperand kernel(*this, k, window, c.f, c.bf16);
    for_passes(
        c,
        [&](int64_t first, int64_t images, const float* cols, const uint16_t* cols16) {
          int64_t rows = images * places;
          if (c.bf16)
            rounded_product(false, false, rows, c.f, window, 1.0f, cols16, kernel.rounded(), 0.0f,
                            y + first * places * c.f, c.f);
          else gemm(false, false, rows, c.f, window, 1.0f, cols, window, k, c.f, 0.0f, y + first * places * c.f, c.f);
        },
        x);
    bias_activation(y, b, c.n * places, c.f, c.relu ? Activation::ReLU : Activation::Linear);
  }
  void conv2d_backward_data(const kernels::Conv2dShape& sh, const float* dy, const float* k, float* dx) override {
    launch::Conv c = conv_of(sh);
    int64_t places = c.oh * c.ow, window = c.kh * c.kw * c.c;
    ConvOperand kernel(*this, k, window, c.f, c.bf16), gradient(*this, dy, c.n * places, c.f, c.bf16);
    bool direct = is_pointwise(c);  // the im2col matrix is the input itself: its gradient is dx
    for_passes(c, [&](int64_t first, int64_t images, const float*, const uint16_t*) {
      int64_t rows = images * places;
      Gpu::Scratch dcols(g_, direct ? 0 : static_cast<size_t>(rows * window) * sizeof(float));
      float* to = direct ? dx + first * places * window : dcols.as<float>();
      if (c.bf16)
        rounded_product(false, true, rows, window, c.f, 1.0f, gradient.rounded() + first * places * c.f,
                        kernel.rounded(), 0.0f, to, window);
      else gemm(false, true, rows, window, c.f, 1.0f, dy + first * places * c.f, c.f, k, c.f, 0.0f, to, window);
      if (!direct) run(launch::col2im(c, to, first, images, dx, s()), "col2im");
    });
  }
  void conv2d_backward_weights(const kernels::Conv2dShape& sh, const float* x, const float* dy, float* dk,
                               float* db) override {
    launch::Conv c = conv_of(sh);
    int64_t places = c.oh * c.ow, window = c.kh * c.kw * c.c;
    ConvOperand gradient(*this, dy, c.n * places, c.f, c.bf16);
    for_passes(
        c,
        [&](int64_t first, int64_t images, const float* cols, const uint16_t* cols16) {
          int64_t rows = images * places;
          float beta = first == 0 ? 0.0f : 1.0f;  // the passes add up in order
          if (c.bf16)
            rounded_product(true, false, window, c.f, rows, 1.0f, cols16, gradient.rounded() + first * places * c.f,
                            beta, dk, c.f);
          else gemm(true, false, window, c.f, rows, 1.0f, cols, window, dy + first * places * c.f, c.f, beta, dk, c.f);
        },
        x);
    if (c.n == 0) {  // no pass wrote the kernel's gradient
      float zero = 0.0f;
      run(launch::fill(dk, &zero, sizeof zero, static_cast<size_t>(window * c.f), s()), "fill");
    }
    if (db != nullptr) column_sums(dy, c.n * places, c.f, db);
  }
  // Max pooling's workspace: where in each output's window its maximum was (int32).
  size_t pool2d_workspace_bytes(const kernels::Pool2dShape& sh) override {
    return sh.kind == kernels::PoolKind::Max ? static_cast<size_t>(sh.n * sh.oh * sh.ow * sh.c) * sizeof(int32_t) : 0;
  }
  void pool2d_forward(const kernels::Pool2dShape& sh, const float* x, float* y, void* ws) override {
    run(launch::pool2d_forward(pool_of(sh), x, y, static_cast<int32_t*>(ws), s()), "pool2d_forward");
  }
  void pool2d_backward(const kernels::Pool2dShape& sh, const float* dy, const void* ws, float* dx) override {
    run(launch::pool2d_backward(pool_of(sh), dy, static_cast<const int32_t*>(ws), dx, s()), "pool2d_backward");
  }
  void conv2d_max_pool2d_forward(const kernels::Conv2dShape& conv, const kernels::Pool2dShape& pool, const float* x,
                                 const float* k, const float* b, float* p, void* ws) override {
    Gpu::Scratch y(g_, conv_output_bytes(conv));
    conv2d_forward(conv, x, k, b, y.as<float>());
    pool2d_forward(pool, y.as<float>(), p, ws);
  }
  void conv2d_max_pool2d_backward(const kernels::Conv2dShape& conv, const kernels::Pool2dShape& pool, const float* x,
                                  const float* k, const float* p, const void* ws, const float* dp, float* dx, float* dk,
                                  float* db) override {
    Gpu::Scratch dy(g_, conv_output_bytes(conv));
    run(launch::unpool_relu(pool_of(pool), p, static_cast<const int32_t*>(ws), dp, dy.as<float>(), s()), "unpool_relu");
    if (dx != nullptr) conv2d_backward_data(conv, dy.as<float>(), k, dx);
    conv2d_backward_weights(conv, x, dy.as<float>(), dk, db);
  }

  void sgd_update(float* w, const float* g, float* v, int64_t n, float lr, float momentum, bool nesterov) override {
    run(launch::sgd_update(w, g, v, n, lr, momentum, nesterov, s()), "sgd_update");
  }
  void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                   int64_t step) override {
    run(launch::adam_update(w, g, m, v, n, kernels::elements::adam_alpha(lr, b1, b2, step), b1, b2, eps, s()),
        "adam_update");
  }
  void rmsprop_update(float* w, const float* g, float* ms, float* v, int64_t n, float lr, float rho, float momentum,
                      float eps) override {
    run(launch::rmsprop_update(w, g, ms, v, n, lr, rho, momentum, eps, s()), "rmsprop_update");
  }
  void adagrad_update(float* w, const float* g, float* acc, int64_t n, float lr, float eps) override {
    run(launch::adagrad_update(w, g, acc, n, lr, eps, s()), "adagrad_update");
  }

 private:
  // The stream, with this GPU made the calling thread's current one (an argument of every launch,
  // so it runs before the launch does).
  void* s() const {
    g_.use();
    return g_.stream;
  }
  void use() const { g_.use(); }
  void run(int code, const char* what) const { check(code, "{} on cuda:{}", what, g_.index); }
  void to_host(void* host, const void* from, size_t bytes, const char* what) const {
    check(api::copy_async(host, from, bytes, s()), "{}'s result to the host", what);
    check(api::synchronize_stream(s()), "{} on cuda:{}", what, g_.index);
  }
  void host_sums(int which, const float* a, const float* b, int64_t rows, int64_t c, double* sums) {
    size_t bytes = static_cast<size_t>(which == 2 ? 2 * c : c) * sizeof(double);
    Gpu::Scratch on_device(g_, bytes), workspace(g_, launch::channel_sums_workspace(rows, c));
    run(launch::channel_sums(which, a, b, rows, c, on_device.as<double>(), workspace.as<void>(), s()),
        "batch normalization's sums");
    to_host(sums, on_device.as<double>(), bytes, "batch normalization's sums");
  }
  void rounded_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                       const uint16_t* b, float beta, float* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) return scale_rows(c, m, n, ldc, beta);
    check_fits_int(m, n, k, std::max({m, n, k, ldc}));
    use();
    std::lock_guard lock(g_.blas_mutex);
    check(api::blas_gemm_bf16(g_.blas, ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, ldc),
          "cublasGemmEx (bf16) {}x{}x{} on cuda:{}", m, n, k, g_.index);
  }
  // C(m × n, rows ldc apart) = β·C; zeros for β = 0, whatever C held (0 × NaN would stay NaN).
  void scale_rows(float* c, int64_t m, int64_t n, int64_t ldc, float beta) {
    float zero = 0.0f;
    for (int64_t i = 0; i < (ldc == n ? 1 : m); ++i) {
      float* row = c + i * ldc;
      int64_t count = ldc == n ? m * n : n;
      if (beta == 0.0f) run(launch::fill(row, &zero, sizeof zero, static_cast<size_t>(count), s()), "fill");
      else unary(kernels::UnaryKind::Scale, row, row, count, beta, 0, 0);
    }
  }
  // cuBLAS takes int sizes.
  void check_fits_int(int64_t m, int64_t n, int64_t k, int64_t ld) const {
    if (std::max({m, n, k, ld}) > std::numeric_limits<int>::max())
      fail("cuda:{}: a {}x{}x{} product (leading dimension up to {}) is past cuBLAS's int sizes", g_.index, m, n, k,
           ld);
  }
  // A convolution's operand, rounded to bf16 once (packed) where the products are bf16's.
  class ConvOperand {
   public:
    ConvOperand(GpuBackend& b, const float* x, int64_t rows, int64_t cols, bool bf16)
        : rounded_(b.g_, bf16 ? static_cast<size_t>(rows * cols) * 2 : 0) {
      if (bf16 && rows * cols > 0) b.round_bf16(x, cols, rows, cols, rounded_.as<uint16_t>());
    }
    const uint16_t* rounded() const { return rounded_.as<uint16_t>(); }

   private:
    Gpu::Scratch rounded_;
  };
  static constexpr size_t kIm2colBytes = size_t{128} << 20;
  // A 1×1 window at stride 1 without padding: each output place reads its own input place.
  static bool is_pointwise(const launch::Conv& c) {
    return c.kh == 1 && c.kw == 1 && c.sh == 1 && c.sw == 1 && c.pad_top == 0 && c.pad_left == 0 && c.oh == c.h &&
           c.ow == c.w;
  }
  // body(first image, images, im2col matrix, its bf16 copy) for each pass of images; with x null,
  // no matrix is made (the input gradient's passes).
  template <class Body>
  void for_passes(const launch::Conv& c, Body body, const float* x = nullptr) {
    int64_t window = c.kh * c.kw * c.c, places = c.oh * c.ow;
    // Float32s, though the matrix is bf16 under bf16: the input gradient's pass holds float32s.
    size_t per_image = static_cast<size_t>(std::max<int64_t>(places * window, 1)) * sizeof(float);
    int64_t per_pass = std::max<int64_t>(1, static_cast<int64_t>(kIm2colBytes / per_image));
    bool direct = x != nullptr && !c.bf16 && is_pointwise(c);
    for (int64_t first = 0; first < c.n; first += per_pass) {
      int64_t images = std::min(per_pass, c.n - first);
      size_t bytes = x == nullptr || direct ? 0 : static_cast<size_t>(images * places * window) * (c.bf16 ? 2 : 4);
      Gpu::Scratch cols(g_, bytes);
      if (bytes > 0)
        run(launch::im2col(c, x, first, images, c.bf16 ? nullptr : cols.as<float>(),
                           c.bf16 ? cols.as<uint16_t>() : nullptr, s()),
            "im2col");
      body(first, images, direct ? x + first * places * c.c : cols.as<float>(), cols.as<uint16_t>());
    }
  }
  static size_t conv_output_bytes(const kernels::Conv2dShape& c) {
    return static_cast<size_t>(c.n * c.oh * c.ow * c.f) * sizeof(float);
  }

  Gpu& g_;
};

}  // namespace

std::unique_ptr<kernels::Backend> make_backend(Gpu& gpu) { return std::make_unique<GpuBackend>(gpu); }

}  // namespace tandem::cuda
#endif
