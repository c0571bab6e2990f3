// The CUDA kernels of the elementwise, loss, normalization and update families, and the ordered
// products: grids over kernels/elements.h's functions (C++17, nvcc). Each launcher queues its work
// on the stream it is handed and returns the launch's error code.
#include <cuda_runtime.h>

#include "cuda/device_api.h"
#include "cuda/grid.cuh"
#include "kernels/elements.h"

namespace tandem::cuda::launch {
namespace {
namespace el = kernels::elements;
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

int fill(void* to, const void* pattern, size_t pattern_bytes, size_t count, void* stream) {
  // The pattern travels as the kernel's argument (at most 8 bytes: a tensor element).
  unsigned char p[8] = {};
  for (size_t i = 0; i < pattern_bytes && i < 8; ++i) p[i] = static_cast<const unsigned char*>(pattern)[i];
  auto* out = static_cast<unsigned char*>(to);
  size_t width = pattern_bytes;
  if (width == 1) return int(cudaMemsetAsync(to, p[0], count, as_stream(stream)));
  return each(int64_t(count), stream, [=] __device__(int64_t i) {
    for (size_t b = 0; b < width; ++b) out[size_t(i) * width + b] = p[b];
  });
}

int unary(int kind, const float* x, float* y, int64_t n, float factor, float low, float high, void* stream) {
  return each(n, stream, [=] __device__(int64_t i) { y[i] = el::unary(kind, x[i], factor, low, high); });
}
int unary_backward(int kind, const float* x, const float* dy, float* dx, int64_t n, float factor, float low, float high,
                   void* stream) {
  return each(n, stream, [=] __device__(int64_t i) {
    dx[i] = el::unary_backward(kind, x == nullptr ? 0.0f : x[i], dy[i], factor, low, high);
  });
}
int binary(int kind, const float* a, const float* b, float* y, int64_t n, int64_t b_n, void* stream) {
  return each(n, stream, [=] __device__(int64_t i) { y[i] = el::binary(kind, a[i], b[b_n < n ? i % b_n : i]); });
}

namespace {
// One block: each thread sums a strided slice in double, then a fixed tree; the order depends on n
// only, so the bits repeat.
__global__ void sum_kernel(const float* x, int64_t n, double* out) {
  __shared__ double partial[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += x[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}
}  // namespace
int sum(const float* x, int64_t n, double* device_sum, void* stream) {
  sum_kernel<<<1, kThreads, 0, as_stream(stream)>>>(x, n, device_sum);
  return int(cudaGetLastError());
}

namespace {
// Column sums of a rows × cols matrix in a tree fixed by the shape alone (never by the launch), so
// the bits repeat: the rows cut into chunks of kChunkRows; in a chunk, lane t of a column sums rows
// t, t + kLanes, … in order, then the kLanes lanes add pairwise in shared memory. The chunks' sums
// are a (chunks × cols) matrix, reduced the same way until one row is left. A block is 32 columns ×
// kLanes lanes: a warp reads 32 neighbouring columns of a row, so the card reads the matrix once at
// full width, however few the columns (the bias of 10 units) or many the rows (a convolution's).
constexpr int kColumnsPerBlock = 32, kLanes = 8;
constexpr int64_t kChunkRows = 256;
constexpr int64_t kMaxGridY = 65535;

__host__ __device__ inline int64_t chunks_of(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }

// out[chunk · cols + j] = Σ over the chunk's rows of load(i, j).
template <class Acc, class Load>
__global__ void column_chunks(int64_t rows, int64_t cols, Load load, Acc* out) {
  __shared__ Acc lanes[kLanes][kColumnsPerBlock];
  int64_t j = blockIdx.x * int64_t{kColumnsPerBlock} + threadIdx.x;
  for (int64_t chunk = blockIdx.y; chunk < chunks_of(rows); chunk += gridDim.y) {
    int64_t end = (chunk + 1) * kChunkRows < rows ? (chunk + 1) * kChunkRows : rows;
    Acc s = 0;
    if (j < cols)
      for (int64_t i = chunk * kChunkRows + threadIdx.y; i < end; i += kLanes) s += load(i, j);
    lanes[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int width = kLanes / 2; width > 0; width /= 2) {
      if (int(threadIdx.y) < width) lanes[threadIdx.y][threadIdx.x] += lanes[threadIdx.y + width][threadIdx.x];
      __syncthreads();
    }
    if (threadIdx.y == 0 && j < cols) out[chunk * cols + j] = lanes[0][threadIdx.x];
    __syncthreads();  // lanes is written again by the next chunk
  }
}

template <class Acc, class Load>
int column_pass(int64_t rows, int64_t cols, Load load, Acc* out, cudaStream_t stream) {
  int64_t chunks = chunks_of(rows);
  dim3 grid(unsigned((cols + kColumnsPerBlock - 1) / kColumnsPerBlock),
            unsigned(chunks < kMaxGridY ? chunks : kMaxGridY));
  column_chunks<Acc><<<grid, dim3(kColumnsPerBlock, kLanes), 0, stream>>>(rows, cols, load, out);
  return int(cudaGetLastError());
}

// Elements of the workspace reduce_columns needs for rows × cols (0 when one pass does).
size_t reduction_workspace(int64_t rows, int64_t cols) {
  size_t total = 0;
  for (int64_t chunks = chunks_of(rows); chunks > 1; chunks = chunks_of(chunks)) total += size_t(chunks * cols);
  return total;
}

// out[j] = Σ_i load(i, j), through the workspace's levels of partial sums.
template <class Acc, class Load>
int reduce_columns(int64_t rows, int64_t cols, Load load, Acc* out, Acc* workspace, void* stream_handle) {
  cudaStream_t stream = as_stream(stream_handle);
  if (cols <= 0) return 0;
  if (rows <= 0) return each(cols, stream_handle, [=] __device__(int64_t j) { out[j] = Acc(0); });
  int64_t chunks = chunks_of(rows);
  int r = column_pass<Acc>(rows, cols, load, chunks == 1 ? out : workspace, stream);
  const Acc* level = workspace;
  while (r == 0 && chunks > 1) {
    int64_t next = chunks_of(chunks);
    Acc* to = next == 1 ? out : const_cast<Acc*>(level) + chunks * cols;
    r = column_pass<Acc>(
        chunks, cols, [=] __device__(int64_t i, int64_t j) { return level[i * cols + j]; }, to, stream);
    level = to;
    chunks = next;
  }
  return r;
}
}  // namespace

int dropout(const float* x, float* y, float* mask, int64_t rows, int64_t per_sample, float rate, uint64_t seed,
            uint64_t step, int64_t sample_offset, int64_t features, int64_t feature_offset, void* stream) {
  return each(rows * per_sample, stream, [=] __device__(int64_t i) {
    int64_t row = i / per_sample, j = i % per_sample;
    float m = el::dropout_mask(seed, step, sample_offset, row, features, feature_offset, j, rate);
    mask[i] = m;
    y[i] = x[i] * m;
  });
}

int round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* y, void* stream) {
  return each(rows * cols, stream, [=] __device__(int64_t i) { y[i] = el::to_bf16(x[(i / cols) * ld + i % cols]); });
}

int gemm_tn_ordered(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, bool add,
                    float* c, int64_t ldc, void* stream) {
  return each(m * n, stream, [=] __device__(int64_t e) {
    int64_t i = e / n, j = e % n;
    float s = 0.0f;
    for (int64_t p = 0; p < k; ++p) s = fmaf(a[p * lda + i], b[p * ldb + j], s);
    c[i * ldc + j] = add ? c[i * ldc + j] + s : s;
  });
}
int gemm_ordered(bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc, void* stream) {
  return each(m * n, stream, [=] __device__(int64_t e) {
    int64_t i = e / n, j = e % n;
    float s = 0.0f;
    for (int64_t p = 0; p < k; ++p) s = fmaf(a[i * lda + p], transpose_b ? b[j * ldb + p] : b[p * ldb + j], s);
    c[i * ldc + j] = s;
  });
}

int bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, int act, void* stream) {
  if (act == el::kSoftmax) {
    return each(rows, stream, [=] __device__(int64_t r) {
      float* row = y + r * cols;
      if (bias != nullptr)
        for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
      el::softmax_row(row, cols, row);
    });
  }
  return each(rows * cols, stream, [=] __device__(int64_t i) {
    float z = bias == nullptr ? y[i] : y[i] + bias[i % cols];
    y[i] = el::activation(act, z);
  });
}
int activation_backward(const float* dy, const float* z, const float* y, float* dz, int64_t rows, int64_t cols, int act,
                        void* stream) {
  if (act == el::kSoftmax) {
    return each(rows, stream, [=] __device__(int64_t r) {
      const float *yr = y + r * cols, *dyr = dy + r * cols;
      float dot = 0.0f;
      for (int64_t j = 0; j < cols; ++j) dot += dyr[j] * yr[j];
      for (int64_t j = 0; j < cols; ++j) dz[r * cols + j] = yr[j] * (dyr[j] - dot);
    });
  }
  return each(rows * cols, stream, [=] __device__(int64_t i) {
    dz[i] = el::activation_backward(act, dy[i], z == nullptr ? 0.0f : z[i], y == nullptr ? 0.0f : y[i]);
  });
}
int copy_blocks(const float* x, float* y, int64_t blocks, int64_t rows, int64_t width, int64_t x_block, int64_t x_row,
                int64_t y_block, int64_t y_row, void* stream) {
  return each(blocks * rows * width, stream, [=] __device__(int64_t e) {
    int64_t j = e % width, r = (e / width) % rows, b = e / (width * rows);
    y[b * y_block + r * y_row + j] = x[b * x_block + r * x_row + j];
  });
}
int column_sums(const float* dy, int64_t rows, int64_t cols, float* db, void* workspace, void* stream) {
  return reduce_columns<float>(
      rows, cols, [=] __device__(int64_t i, int64_t j) { return dy[i * cols + j]; }, db, static_cast<float*>(workspace),
      stream);
}
size_t column_sums_workspace(int64_t rows, int64_t cols) { return reduction_workspace(rows, cols) * sizeof(float); }

int softmax_cross_entropy(const float* logits, const int32_t* labels, const float* targets, int64_t rows, int64_t cols,
                          float* loss, float* probabilities, void* stream) {
  return each(rows, stream, [=] __device__(int64_t r) {
    const float* row = logits + r * cols;
    float log_z = el::softmax_row(row, cols, probabilities + r * cols);
    if (labels != nullptr) {
      loss[r] = log_z - row[labels[r]];
      return;
    }
    float l = 0.0f;
    for (int64_t j = 0; j < cols; ++j) l += targets[r * cols + j] * (log_z - row[j]);
    loss[r] = l;
  });
}
int cross_entropy_backward(const float* p, const int32_t* labels, const float* targets, const float* dy, float* d,
                           int64_t rows, int64_t cols, void* stream) {
  return each(rows, stream, [=] __device__(int64_t r) {
    float g = dy[r];
    if (labels != nullptr) {
      for (int64_t j = 0; j < cols; ++j) d[r * cols + j] = g * p[r * cols + j];
      d[r * cols + labels[r]] -= g;
      return;
    }
    const float* t = targets + r * cols;
    float total = 0.0f;
    for (int64_t j = 0; j < cols; ++j) total += t[j];
    for (int64_t j = 0; j < cols; ++j) d[r * cols + j] = g * (p[r * cols + j] * total - t[j]);
  });
}
int pointwise_loss(int kind, const float* pred, const float* target, float* loss, int64_t rows, int64_t per_row,
                   void* stream) {
  return each(rows, stream, [=] __device__(int64_t r) {
    double s = 0.0;
    for (int64_t j = r * per_row; j < (r + 1) * per_row; ++j) s += el::pointwise_term(kind, pred[j], target[j]);
    loss[r] = float(s / double(per_row));
  });
}
int pointwise_loss_backward(int kind, const float* pred, const float* target, const float* dy, float* dpred,
                            int64_t rows, int64_t per_row, void* stream) {
  return each(rows * per_row, stream, [=] __device__(int64_t i) {
    dpred[i] = el::pointwise_gradient(kind, pred[i], target[i], dy[i / per_row], per_row);
  });
}

int channel_sums(int which, const float* a, const float* b, int64_t rows, int64_t c, double* sums, void* workspace,
                 void* stream) {
  auto* ws = static_cast<double*>(workspace);
  if (which == 0)
    return reduce_columns<double>(
        rows, c, [=] __device__(int64_t i, int64_t j) { return double(a[i * c + j]); }, sums, ws, stream);
  if (which == 1)
    return reduce_columns<double>(
        rows, c,
        [=] __device__(int64_t i, int64_t j) {
          double e = double(a[i * c + j] - b[j]);
          return e * e;
        },
        sums, ws, stream);
  int r = reduce_columns<double>(
      rows, c, [=] __device__(int64_t i, int64_t j) { return double(a[i * c + j]); }, sums, ws, stream);
  if (r != 0) return r;
  return reduce_columns<double>(
      rows, c, [=] __device__(int64_t i, int64_t j) { return double(a[i * c + j] * b[i * c + j]); }, sums + c, ws,
      stream);
}
size_t channel_sums_workspace(int64_t rows, int64_t c) { return reduction_workspace(rows, c) * sizeof(double); }

int batch_norm_normalize(const float* x, const float* mean, const float* rstd, const float* gamma, const float* beta,
                         float* x_hat, float* y, int64_t rows, int64_t c, void* stream) {
  return each(rows * c, stream, [=] __device__(int64_t i) {
    int64_t j = i % c;
    float h = (x[i] - mean[j]) * rstd[j];
    x_hat[i] = h;
    y[i] = gamma[j] * h + beta[j];
  });
}
int batch_norm_input_gradient(const float* dy, const float* x_hat, const float* gamma, const float* rstd,
                              const double* sums, double n, float* dx, int64_t rows, int64_t c, void* stream) {
  return each(rows * c, stream, [=] __device__(int64_t i) {
    int64_t j = i % c;
    float scale = gamma[j] * rstd[j];
    dx[i] = scale * (dy[i] - float(sums[j] / n) - x_hat[i] * float(sums[c + j] / n));
  });
}
int scale_by_channels(const float* dy, const float* gamma, const float* rstd, float* dx, int64_t n, int64_t c,
                      void* stream) {
  return each(n, stream, [=] __device__(int64_t i) { dx[i] = gamma[i % c] * rstd[i % c] * dy[i]; });
}
int moving_average(float* moving, const float* value, int64_t n, float momentum, void* stream) {
  return each(n, stream,
              [=] __device__(int64_t i) { moving[i] = moving[i] * momentum + value[i] * (1.0f - momentum); });
}

int sgd_update(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum, bool nesterov,
               void* stream) {
  if (velocity == nullptr || momentum == 0.0f)
    return each(n, stream, [=] __device__(int64_t i) { el::sgd(w[i], g[i], lr); });
  return each(n, stream,
              [=] __device__(int64_t i) { el::sgd_momentum(w[i], g[i], velocity[i], lr, momentum, nesterov); });
}
int adam_update(float* w, const float* g, float* m, float* v, int64_t n, float alpha, float beta1, float beta2,
                float epsilon, void* stream) {
  return each(n, stream, [=] __device__(int64_t i) { el::adam(w[i], g[i], m[i], v[i], alpha, beta1, beta2, epsilon); });
}
int rmsprop_update(float* w, const float* g, float* mean_square, float* velocity, int64_t n, float lr, float rho,
                   float momentum, float epsilon, void* stream) {
  return each(n, stream, [=] __device__(int64_t i) {
    el::rmsprop(w[i], g[i], mean_square[i], velocity == nullptr ? nullptr : velocity + i, lr, rho, momentum, epsilon);
  });
}
int adagrad_update(float* w, const float* g, float* accumulator, int64_t n, float lr, float epsilon, void* stream) {
  return each(n, stream, [=] __device__(int64_t i) { el::adagrad(w[i], g[i], accumulator[i], lr, epsilon); });
}

}  // namespace tandem::cuda::launch
