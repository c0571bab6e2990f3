#pragma once
// Differentiable operations on tensors. Each records itself on the active GradientTape.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/autograd.h"
#include "tandem/collectives/replica_context.h"
#include "tandem/op_types.h"
#include "tandem/tensor.h"

namespace tandem {

// Counter-based randomness for one call: element i of sample s draws Philox(seed, step) at
// index (sample_offset + s) * per_sample + i, so a sample's mask does not depend on batching.
struct RandomKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t sample_offset = 0;
  // A slice of a sample's features (a tensor-parallel layer's columns): the slice starts at
  // feature_offset of a sample `features` wide, and draws what the whole sample would there
  // (features 0: the tensor holds whole samples).
  int64_t feature_offset = 0;
  int64_t features = 0;
};

namespace ops {

class DeferredKernelGradients;
class DeferredMovingStatistics;

// a:(M,K) b:(K,N) -> (M,N); transposes apply to the stored matrices.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// x:(B,I) kernel:(I,U) bias:(U) or undefined -> act(x·kernel + bias):(B,U). Fused. With
// `deferred` (which must outlive backward), backward hands the kernel's gradient to it where it
// defers this kernel (DeferredKernelGradients).
Tensor dense(const Tensor& x, const Tensor& kernel, const Tensor& bias, Activation act,
             DeferredKernelGradients* deferred = nullptr);
// Elementwise activation; Softmax acts on the last axis.
Tensor activation(const Tensor& x, Activation act);
inline Tensor relu(const Tensor& x) { return activation(x, Activation::ReLU); }
inline Tensor softmax(const Tensor& x) { return activation(x, Activation::Softmax); }
// The logits softmax computed `probabilities` from, or an undefined tensor when they did not come
// from softmax: cross-entropy losses score probabilities through them (as Keras does).
Tensor softmax_logits(const Tensor& probabilities);
// Marks `probabilities` as softmax(logits) (a moved copy of softmax's output keeps that link).
void note_softmax_of(const Tensor& probabilities, const Tensor& logits);

// Elementwise arithmetic. add/sub/mul take equal shapes, or b of shape (last dim of a,) (bias).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float factor);
Tensor square(const Tensor& x);
Tensor log(const Tensor& x);
Tensor clip(const Tensor& x, float low, float high);
Tensor abs(const Tensor& x);  // gradient sign(x), 0 at 0 (TensorFlow's)
// A regularizer's penalty on x, a scalar: l1·Σ|x| + l2·Σx² (Keras' L1L2.__call__).
Tensor penalty(const Tensor& x, const Regularizer& regularizer);
// Its gradient, l1·sign(x) + 2·l2·x, not recorded (what the penalty adds to x's gradient).
Tensor penalty_gradient(const Tensor& x, const Regularizer& regularizer);
// Σ of the variables' regularizer penalties (Variable::regularizer): a scalar on the first
// regularized variable's device, or undefined where none has one.
Tensor penalties(std::span<Variable* const> variables);
// The penalty of each row of x:(B, …) -> (B), an activity regularizer's per sample.
Tensor row_penalties(const Tensor& x, const Regularizer& regularizer);
Tensor sum(const Tensor& x);   // -> scalar ()
Tensor mean(const Tensor& x);  // -> scalar ()
Tensor reshape(const Tensor& x, const Shape& shape);

// Losses per sample. logits:(B,C), labels:(B) int32 in [0,C) -> (B).
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels);
// Class labels as int32 (sparse cross-entropy, accuracy), on the labels' device: float labels must
// be whole numbers within int32's range; a NaN, an infinity or a fraction is refused naming `what`,
// the first bad row and its value (a cast would make it some class, or undefined behaviour).
Tensor class_labels(const Tensor& labels, std::string_view what);
// logits:(B,C), targets:(B,C) probabilities -> (B).
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& targets);
// x:(B,...) targets like x -> (B): mean over the other axes of the binary cross-entropy;
// x are logits when from_logits, else probabilities (clipped to [1e-7, 1-1e-7] as Keras does).
Tensor binary_cross_entropy(const Tensor& x, const Tensor& targets, bool from_logits);
// pred, target:(B,...) -> (B): mean squared error over the other axes.
Tensor mean_squared_error(const Tensor& pred, const Tensor& target);

// x:(N,H,W,C) kernel:(KH,KW,C,F) bias:(F) or undefined -> act(conv + bias):(N,OH,OW,F).
// Channels last, as Keras. The activation is fused (ReLU inside oneDNN); Softmax is not accepted.
Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t stride_h, int64_t stride_w,
              Padding padding, Activation act = Activation::Linear);
// The (height, width) a window of kh × kw moved by strides sh, sw gives over h × w, by
// TensorFlow's rules for the padding (as conv2d and the pools compute it); below 1 when it does not fit.
std::pair<int64_t, int64_t> window_output_size(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                               Padding padding);
// Tensors of one shape but along `axis` (negative: from the end) side by side along it.
Tensor concat(std::span<const Tensor> xs, int axis = -1);
// x:(R, C) -> its columns [begin, end), (R, end - begin), a copy.
Tensor columns(const Tensor& x, int64_t begin, int64_t end);
// A model's outputs packed side by side (graph.h's pack_inputs), noted on the packed tensor, so
// that a loss on one output's columns scores the output itself (a softmax's through its logits).
void note_parts(const Tensor& packed, std::vector<Tensor> parts);
// `packed`'s columns [begin, end): the part packed there whole when one was noted (its own shape
// and graph), else columns(packed, begin, end).
Tensor part_columns(const Tensor& packed, int64_t begin, int64_t end);
// x:(N,H,W,C) -> (N, top + H + bottom, left + W + right, C), zeros around x.
Tensor zero_pad2d(const Tensor& x, int64_t top, int64_t bottom, int64_t left, int64_t right);
// x:(N,H,W,C) -> (N,OH,OW,C).
Tensor max_pool2d(const Tensor& x, int64_t pool_h, int64_t pool_w, int64_t stride_h, int64_t stride_w, Padding padding);
Tensor avg_pool2d(const Tensor& x, int64_t pool_h, int64_t pool_w, int64_t stride_h, int64_t stride_w, Padding padding);
// max_pool2d(conv2d(x, kernel, bias, ..., Activation::ReLU), pool ...) in one op: the same values and
// gradients, without keeping or passing over the convolution's output in backward.
Tensor conv2d_max_pool2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t stride_h, int64_t stride_w,
                         Padding padding, int64_t pool_h, int64_t pool_w, int64_t pool_stride_h, int64_t pool_stride_w,
                         Padding pool_padding);

// x:(..., C) normalized per channel. In training, uses the batch statistics and updates
// moving_mean/moving_variance in place (momentum as in Keras); otherwise uses the moving ones.
// With replicas (training under a strategy with more than one): synchronized, the statistics are those of the
// global batch (forward and backward), as one device computes them; otherwise each replica
// normalizes with its own batch's and the moving statistics move toward the replicas' average,
// so that they stay mirrored either way. With `deferred`, the moving statistics are left for it
// to move (DeferredMovingStatistics).
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& moving_mean,
                  Tensor& moving_variance, float momentum, float epsilon, bool training,
                  const distribute::ReplicaContext* replicas = nullptr, bool synchronized = false,
                  DeferredMovingStatistics* deferred = nullptr);

// Given to training batch_norm calls (CallContext::moving_statistics, passed on by the
// BatchNormalization layer), it leaves the moving statistics as they are and keeps each call's
// batch statistics; apply() then moves each layer's moving statistics once,
// toward the average of its calls' (summed in call order). A pipeline stage's micro-batches, each
// normalized with its own statistics (ghost batches), so move them once per global batch, as
// unsynchronized replicas move theirs toward their average.
class DeferredMovingStatistics {
 public:
  DeferredMovingStatistics() = default;
  DeferredMovingStatistics(const DeferredMovingStatistics&) = delete;
  DeferredMovingStatistics& operator=(const DeferredMovingStatistics&) = delete;
  void add(Tensor& moving_mean, Tensor& moving_variance, std::span<const float> mean, std::span<const float> variance,
           float momentum);
  // What the calls of the layer whose moving mean is `moving_mean` (`channels` wide) kept: Σ of
  // their means, then of their variances, per channel, then their count (zeros: no call), to be
  // summed over the copies of a layer (its pipeline's data group) before move().
  std::vector<double> sums(const Tensor& moving_mean, int64_t channels) const;
  // The moving statistics toward the average that `sums` hold (nothing where they count no call).
  static void move(Tensor& moving_mean, Tensor& moving_variance, std::span<const double> sums, float momentum);
  // Every layer's statistics moved (once; nothing kept after).
  void apply();

 private:
  struct Layer {
    Tensor moving_mean, moving_variance;
    float momentum;
    std::vector<double> sums;  // as sums() gives them
  };
  std::vector<Layer> layers_;
};

// Mixed precision (Keras' "mixed_bfloat16" policy; layers hold theirs, nn's mixed_precision): while
// a scope is alive on this thread, the matrix products of dense, matmul and conv2d, and those their
// backward makes, take bf16 operands (rounded to nearest) with float32 accumulation and results,
// on a device that multiplies bf16 in hardware (has_bf16_products); elsewhere they stay float32.
// Tensors, variables, activations, losses and optimizer slots stay float32.
enum class Precision : uint8_t { Float32, MixedBFloat16 };
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision precision);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision previous_;
};
Precision compute_precision();  // this thread's

// While alive on this thread, dense's float32 products (forward's x·kernel, backward's
// dz·kernelᵀ) give every output row bits of its own, whatever other rows are multiplied with it
// (Backend::gemm_ordered: each element one FMA chain in order), where a library's blocking
// would depend on the row count. Deterministic training runs a replica's micro-batches as one
// batch under it. bf16 products are not affected.
class RowExactProducts {
 public:
  RowExactProducts();
  ~RowExactProducts();
  RowExactProducts(const RowExactProducts&) = delete;
  RowExactProducts& operator=(const RowExactProducts&) = delete;

 private:
  bool previous_;
};
bool row_exact_products();  // in force on this thread
// Whether `device` runs those products vectorised (the CPU: AVX-512), not one scalar FMA at a time.
bool has_fast_row_exact_products(Device device);
// Whether `device` multiplies bf16 in hardware (the CPU: AVX512_BF16 or AMX).
bool has_bf16_products(Device device);

// A kernel's gradient as the products dense's backward deferred (DeferredKernelGradients::take):
// Σ_j xs[j]ᵀ·dzs[j], xs[j] (rows_j × in), dzs[j] (rows_j × units), in bf16 products where bf16.
struct KernelProducts {
  std::vector<Tensor> xs, dzs;
  bool bf16 = false;
  // Rows [begin, end) of every call's x and dz (views).
  KernelProducts rows(int64_t begin, int64_t end) const;
  // The bias gradient that goes with them: Σ over the calls, in call order, of dz's column sums
  // (zeros of `units` without any call).
  Tensor bias_gradient(int64_t units, Device device) const;
};

// Given to dense calls (CallContext::kernel_gradients, passed on by the Dense layer), it makes
// their backward, for the kernels given to defer(), keep each call's
// input and pre-activation gradient instead of adding xᵀ·dz to the kernel's gradient; gradient()
// then computes the sum over the calls as one product of their rows stacked in call order. A
// pipeline stage's micro-batches so pay one product over the global batch's rows, as one device
// computes it, instead of one kernel-sized product and sum per micro-batch (with a few rows each,
// memory-bound on a wide layer), at the cost of keeping those inputs until the step's end.
class DeferredKernelGradients {
 public:
  DeferredKernelGradients() = default;
  DeferredKernelGradients(const DeferredKernelGradients&) = delete;
  DeferredKernelGradients& operator=(const DeferredKernelGradients&) = delete;
  // with_bias: dense's backward leaves the bias gradient too (the caller sums the kept dz's rows).
  void defer(const Tensor& kernel, bool with_bias = false);
  // Whether dense's backward on `device` can keep its products for one (the CPU's: its backend
  // computes the stacked product; elsewhere each call's gradient is summed as it comes).
  static bool takes(Device device);
  bool defers(const Tensor& kernel) const;
  bool defers_bias(const Tensor& kernel) const;
  void add(const Tensor& kernel, const Tensor& x, const Tensor& dz, bool bf16);  // bf16: the product's precision
  // Σ over the calls kept of xᵀ·dz (zeros without any), and the calls forgotten.
  Tensor gradient(const Tensor& kernel);
  // The calls kept, in call order, handed over and forgotten here.
  KernelProducts take(const Tensor& kernel);

 private:
  struct Kept {
    Tensor kernel;
    std::vector<Tensor> xs, dzs;
    bool bf16;
    bool with_bias = false;
  };
  Kept* find(const Tensor& kernel);
  std::vector<Kept> kept_;
};

// Deterministic training's kernel gradients, tile by tile: the kernel's rows cut into runs of
// kernel_tile_rows (fixed by its shape alone), each tile of each product one product of its own
// (float32: Backend::gemm_tn_ordered, each element one FMA chain over the rows, added to the
// running sum in registers), the products of a part summed in order. A tile's bits so depend on
// the shapes alone, not on which thread computes it or which other tiles it computes, and the same
// tile can be summed over parts where their gradients are never whole.
int64_t kernel_tile_rows(int64_t in, int64_t units);
// Rows [row, row + rows) of `p`'s sum (rows ≤ kernel_tile_rows; zeros without products): written
// to `out` (its first element, rows × units, row stride units), or added to it where `add`.
// `scratch`: room for 2 · rows · units floats, used where a product is added.
void kernel_products_tile(const KernelProducts& p, int64_t row, int64_t rows, int64_t units, bool add, float* out,
                          float* scratch);

// Deterministic replicated training cuts the global batch into a fixed list of parts
// (micro-batches) spread over the replicas. Given this replica's parts' values (per_part each,
// in part order), returns every part's values (parts × per_part, in part order; a part with no
// rows all zeros), the same on every replica.
using GatherParts = std::function<std::vector<double>(std::span<const double> values, size_t per_part)>;

// What batch_norm_parts leaves for after backward; finish() stands in for a replica whose parts
// all had no rows (so that the collectives still match) and checks that backward ran.
class BatchNormPartsBackward {
 public:
  virtual ~BatchNormPartsBackward() = default;
  virtual void finish() = 0;
};

// Training batch normalization of this replica's parts xs (each with its own gamma and beta
// tensors holding the same values, so that each part's gradients stay apart). synchronized: the
// statistics of the whole global batch, every part's sums added in part order (forward and
// backward), so the bits do not depend on how parts are spread over replicas; otherwise each part
// normalizes with its own (ghost batches). The moving statistics move once, toward the global
// statistics or the parts' average (in part order).
std::vector<Tensor> batch_norm_parts(std::span<const Tensor> xs, std::span<const Tensor> gammas,
                                     std::span<const Tensor> betas, Tensor& moving_mean, Tensor& moving_variance,
                                     float momentum, float epsilon, bool synchronized, const GatherParts& gather,
                                     std::shared_ptr<BatchNormPartsBackward>& pending);

// Zeroes each element with probability rate and scales the rest by 1/(1-rate).
Tensor dropout(const Tensor& x, float rate, const RandomKey& key);

// Differentiable collectives over a group of ranks (tensor parallelism, Megatron-LM's f and g),
// each called by every rank of `group` in the same order. Tensors are (batch, features).
//   copy_to_group:     forward x as it is; backward the gradient summed over the ranks
//   reduce_from_group: forward x summed over the ranks; backward the gradient as it is
//   gather_from_group: forward every rank's columns side by side, rank r's `widths[r]` wide;
//                      backward this rank's columns of the gradient
//   scatter_to_group:  forward this rank's columns of x (`widths` as above); backward every
//                      rank's columns of the gradient side by side
Tensor copy_to_group(const Tensor& x, distribute::Communicator& group);
Tensor reduce_from_group(const Tensor& x, distribute::Communicator& group);
Tensor gather_from_group(const Tensor& x, distribute::Communicator& group, std::span<const int64_t> widths);
Tensor scatter_to_group(const Tensor& x, distribute::Communicator& group, std::span<const int64_t> widths);

// x moved to `device` (x itself when it lives there); backward, the gradient moved back to x's
// device, its ops then run with that device's threads (devices.h: compute_device).
Tensor to_device(const Tensor& x, Device device);

}  // namespace ops
}  // namespace tandem
