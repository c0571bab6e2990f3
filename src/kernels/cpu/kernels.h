#pragma once
// CPU kernels on raw, contiguous, row-major float32 buffers. Ops check shapes; kernels trust them.
// The kinds and shapes they take are every device's (kernels/shapes.h).
#include <cstdint>
#include <functional>

#include "core/vectorize.h"
#include "kernels/shapes.h"
#include "tandem/op_types.h"

namespace tandem::kernels::cpu {

// y = factor·x, x², log x, x clipped to [low, high] or |x|, element by element (y may be x).
void unary(UnaryKind kind, const float* x, float* y, int64_t n, float factor, float low, float high);
// dx = factor·dy, 2x·dy, dy/x, dy inside [low, high] and 0 outside, or sign(x)·dy (0 at 0, as
// TensorFlow's); x unused for Scale.
void unary_backward(UnaryKind kind, const float* x, const float* dy, float* dx, int64_t n, float factor, float low,
                    float high);
// y(n) = a op b, with b(b_n) repeated along a's rows when b_n < n (b_n divides n).
void binary(BinaryKind kind, const float* a, const float* b, float* y, int64_t n, int64_t b_n);
// Σ x in double, in index order.
double sum(const float* x, int64_t n);
// mask = 0 or 1/(1-rate) from Philox(seed, step) uniforms at (sample_offset + row)·per_sample + j;
// y = x·mask.
void dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per_sample, float rate, uint64_t seed,
             uint64_t step, int64_t sample_offset, int64_t features, int64_t feature_offset);

// Per-row losses over rows of per_row values: loss(rows) = the row's mean of (p - t)² or of the
// binary cross-entropy of logits or of probabilities (clipped to [ε, 1-ε]), summed in double.
void pointwise_loss(PointwiseLoss kind, const float* pred, const float* target, float* loss, int64_t rows,
                    int64_t per_row);
// dpred = d loss_i / d pred · dy_i.
void pointwise_loss_backward(PointwiseLoss kind, const float* pred, const float* target, const float* dy, float* dpred,
                             int64_t rows, int64_t per_row);

// Batch normalization over rows of c channels. The double sums go to host memory: per channel Σx,
// Σ(x - mean)², and Σdy then Σdy·x̂ (2c values).
void channel_sums(const float* x, int64_t rows, int64_t c, double* sums);
void squared_deviations(const float* x, const float* mean, int64_t rows, int64_t c, double* sums);
void batch_norm_backward_sums(const float* dy, const float* x_hat, int64_t rows, int64_t c, double* sums);
// x̂ = (x - mean)·rstd, y = γ·x̂ + β.
void batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                          float* x_hat, float* y, int64_t rows, int64_t c);
// dx = γ·rstd · (dy - Σdy/n - x̂·Σ(dy·x̂)/n), with the 2c sums (host memory) over n rows.
void batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                               const double* sums, double n, float* dx, int64_t rows, int64_t c);
// dx = γ·rstd·dy per channel (n values, c channels).
void scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n, int64_t c);
// moving = moving·momentum + value·(1 - momentum).
void moving_average(float* moving, const float* value, int64_t n, float momentum);

// C(M,N) = alpha·op(A)·op(B) + beta·C through oneDNN's sgemm.
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same with bf16 products (mixed precision): op(A) and op(B) rounded to bf16 (to nearest,
// ties to even), float32 accumulation and C (gemm_bf16.cpp).
void gemm_bf16(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// Whether the CPU multiplies bf16 in hardware (AVX512_BF16 or AMX, as oneDNN sees it; its
// ONEDNN_MAX_CPU_ISA can lower it): without, bf16 products would be slower than float32.
bool bf16_products_native();
// x rounded to bf16 (to nearest, ties to even; the upper 16 bits of the float32 it stands for), on
// this thread.
void round_to_bf16(const float* x, uint16_t* y, int64_t n);
// x (rows × cols, rows ld apart) rounded to bf16 into y, packed (rows × cols), on the intra-op pool.
void round_matrix_to_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y);
// gemm_bf16 on operands already rounded and packed as stored (A: m × k, or k × m transposed; B:
// k × n, or n × k): the same bits as gemm_bf16 on the float32 operands they were rounded from.
void gemm_bf16_rounded(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, const uint16_t* b, float beta, float* c, int64_t ldc);

// C(m × n) = Aᵀ·B, or C += Aᵀ·B where `add`, for A (k × m, rows lda apart) and B (k × n, ldb):
// each element one FMA chain over k in order from zero, then stored or added to C once, on the
// intra-op pool. AVX-512 and AVX2 blocks and plain std::fma give the same bits.
void gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                     bool add, float* c, int64_t ldc);
// C(m × n) = A·op(B) for A (m × k, rows lda apart) and B (k × n, or n × k where transpose_b; ldb):
// each element one FMA chain over k in order from zero, so that a row of C has the same bits
// whatever other rows are multiplied with it (and whatever the vector level), on the intra-op
// pool. A transposed B is laid out once per call.
void gemm_ordered(bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc);
// The two at a given vector level, whatever core::isa() says (tests compare the levels; one above
// the host's throws tandem::Error).
void gemm_tn_ordered_at(core::Isa level, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                        int64_t ldb, bool add, float* c, int64_t ldc);
void gemm_ordered_at(core::Isa level, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float* c, int64_t ldc);
// out (cols × rows) = mᵀ for m (rows × cols, rows ld apart).
void transpose(const float* m, int64_t rows, int64_t cols, int64_t ld, float* out);
// Whether the two run vectorised here (AVX2 or AVX-512 at core::isa()), rather than one scalar FMA
// at a time.
bool ordered_products_vectorised();

// y(rows,cols) = act(y + bias) in place; bias may be null. Softmax acts per row.
void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, Activation act);
// dz = dy · act'(z) given z (pre-activation, may be null when act needs only y) and y = act(z).
// For Softmax, rows/cols give the row layout.
void activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols,
                         Activation act);
// db(cols) = column sums of dy(rows,cols).
void column_sums(const float* dy, int64_t rows, int64_t cols, float* db);

// p = softmax(row) (p may be row itself); returns the row's log-partition log Σ exp(row).
float softmax_row(const float* row, int64_t cols, float* p);

// Fused softmax + cross-entropy. loss(rows) per row; dlogits (may be null) = (softmax - target)·grad_scale.
void sparse_softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t cols, float* loss,
                                  float* probabilities);
void softmax_cross_entropy(const float* logits, const float* targets, int64_t rows, int64_t cols, float* loss,
                           float* probabilities);
// dlogits(rows,cols) = dy_i · (p · Σt - t) from the probabilities p, with t the one-hot of labels
// (when labels is not null) or the targets.
void cross_entropy_backward(const float* probabilities, const int32_t* labels, const float* targets, const float* dy,
                            float* dlogits, int64_t rows, int64_t cols);

// Optimizer updates, element by element over n parameters.
void sgd_update(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum, bool nesterov);
void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                 float epsilon, int64_t step);
void rmsprop_update(float* w, const float* g, float* mean_square, float* velocity, int64_t n, float lr, float rho,
                    float momentum, float epsilon);
void adagrad_update(float* w, const float* g, float* accumulator, int64_t n, float lr, float epsilon);

void conv2d_forward(const Conv2dShape& s, const float* x, const float* kernel, const float* bias, float* y);
void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* kernel, float* dx);
void conv2d_backward_weights(const Conv2dShape& s, const float* x, const float* dy, float* dkernel, float* dbias);
// Few input values per window (kh·kw·c ≤ 32, float32 products): Tandem's own loops, for one chunk
// of images (conv2d_forward and conv2d_backward_weights take them for such shapes).
bool conv2d_is_small(const Conv2dShape& s);
void conv2d_small_forward(const Conv2dShape& s, const float* x, const float* kernel, const float* bias, float* y);
// Where a convolution's backward reads its output's gradient: dy, (n, oh, ow, f); or, with dy null,
// unpooled from the gradient dp of a 2 × 2 max pooling at stride 2 that tiles the output: dp where
// the window's maximum was (arg, the pooling's window indices), else 0 (a ReLU convolution then
// max pooling: dp already 0 where the pooled output is not positive).
struct ConvOutputGradient {
  const float* dy = nullptr;
  const float* dp = nullptr;
  const int32_t* arg = nullptr;
};
void conv2d_small_backward_weights(const Conv2dShape& s, const float* x, const ConvOutputGradient& g, float* dkernel,
                                   float* dbias);
// A small convolution's weight and bias gradients over the chunks conv2d_backward_weights cuts (and
// summed as it sums them), each chunk's output gradient from gradient_of(first image, images), on
// the thread that computes the chunk.
void conv2d_small_weight_gradients(const Conv2dShape& s, const float* x,
                                   const std::function<ConvOutputGradient(int64_t first, int64_t images)>& gradient_of,
                                   float* dkernel, float* dbias);
// The same, a chunk of images at a time (the chunks conv2d_forward and conv2d_backward_weights cut,
// so the bits are theirs), with the chunk's output or output gradient in a buffer of its thread
// instead of the batch's: forward hands each chunk's output to then(first image, images, y);
// backward has fill_dy(first image, images, dy) write each chunk's output gradient, then runs the
// chunk's backward-data (where dx is not null) and backward-weights (dbias may be null).
using ConvChunkOutput = std::function<void(int64_t first, int64_t images, const float* y)>;
using ConvChunkGradient = std::function<void(int64_t first, int64_t images, float* dy)>;
void conv2d_forward_chunks(const Conv2dShape& s, const float* x, const float* kernel, const float* bias,
                           const ConvChunkOutput& then);
void conv2d_backward_chunks(const Conv2dShape& s, const float* x, const float* kernel, const ConvChunkGradient& fill_dy,
                            float* dx, float* dkernel, float* dbias);

// workspace: for max pooling, oneDNN's argmax record (pool2d_workspace_bytes); unused for average.
size_t pool2d_workspace_bytes(const Pool2dShape& s);
void pool2d_forward(const Pool2dShape& s, const float* x, float* y, void* workspace);
void pool2d_backward(const Pool2dShape& s, const float* dy, const void* workspace, float* dx);
// A ReLU convolution (conv.fused_relu) then max pooling over its output (pool), a chunk of images
// at a time: the convolution's output never leaves its thread's buffer. p and workspace as
// pool2d_forward's.
void conv2d_max_pool2d_forward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x, const float* kernel,
                               const float* bias, float* p, void* workspace);
// Its backward from dp, the pooled output's gradient: ReLU's derivative where p > 0, the pool's
// backward and the convolution's, chunk by chunk (dx null where not wanted; dbias may be null).
void conv2d_max_pool2d_backward(const Conv2dShape& conv, const Pool2dShape& pool, const float* x, const float* kernel,
                                const float* p, const void* workspace, const float* dp, float* dx, float* dkernel,
                                float* dbias);

}  // namespace tandem::kernels::cpu
