// batch_norm: x:(R, C) viewed as rows of channels (any leading axes) -> (R, C);
//   training: y = γ·(x - μ_B)·rstd + β with batch mean μ_B and rstd = 1/sqrt(var_B + ε); the moving
//   statistics move toward the batch ones: m = m·momentum + μ_B·(1 - momentum) (Keras).
//   inference: the moving statistics replace the batch ones.
// backward (training): dx = rstd/R · (R·dx̂ - Σdx̂ - x̂·Σ(dx̂·x̂)), dx̂ = dy·γ; dγ = Σ dy·x̂; dβ = Σ dy.
// Synchronized across replicas, R and the sums in dx run over the global batch (one collective
// each for the mean, the variance and the two backward sums); dγ and dβ stay the replica's own
// (the gradient all-reduce sums them).
#include <cmath>
#include <vector>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct BatchNormNode : autograd::Node {
  Tensor x_hat, gamma, rstd;
  bool training;
  CrossReplicaSum sync;  // set when synchronized
  double global_rows = 0;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t c = gamma.dim(0), rows = x_hat.numel() / c;
    auto cu = static_cast<size_t>(c);
    const float* g = dy.data<float>();
    const float* xh = x_hat.data<float>();
    std::vector<double> sums(2 * cu, 0.0);  // Σdy, then Σdy·x̂
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < c; ++j) {
        sums[static_cast<size_t>(j)] += g[i * c + j];
        sums[cu + static_cast<size_t>(j)] += g[i * c + j] * xh[i * c + j];
      }
    std::vector<double> local = sums;
    double n = static_cast<double>(rows);
    if (sync) {
      sync(sums);
      n = global_rows;
    }
    const double* sum_dy = sums.data();
    const double* sum_dy_xh = sums.data() + cu;
    if (needs(0)) {
      Tensor dx = Tensor::empty(x_hat.shape());
      float* d = dx.data<float>();
      const float* ga = gamma.data<float>();
      const float* rs = rstd.data<float>();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < c; ++j) {
          auto ju = static_cast<size_t>(j);
          float scale = ga[j] * rs[j];
          d[i * c + j] = training ? scale * (g[i * c + j] - static_cast<float>(sum_dy[ju] / n) -
                                             xh[i * c + j] * static_cast<float>(sum_dy_xh[ju] / n))
                                  : scale * g[i * c + j];
        }
      tape.accumulate(input_slots[0], dx);
    }
    if (needs(1)) {
      Tensor dg = Tensor::empty({c});
      for (int64_t j = 0; j < c; ++j) dg.data<float>()[j] = static_cast<float>(local[cu + static_cast<size_t>(j)]);
      tape.accumulate(input_slots[1], dg);
    }
    if (needs(2)) {
      Tensor db = Tensor::empty({c});
      for (int64_t j = 0; j < c; ++j) db.data<float>()[j] = static_cast<float>(local[static_cast<size_t>(j)]);
      tape.accumulate(input_slots[2], db);
    }
  }
};

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, Tensor& moving_mean,
                  Tensor& moving_variance, float momentum, float epsilon, bool training,
                  const CrossReplicaSum& cross_replica, bool synchronized) {
  const char* op = "batch_norm";
  require_float(x_in, op, "x");
  require_float(gamma, op, "gamma");
  require_float(beta, op, "beta");
  if (x_in.rank() < 2) fail("{}: x needs a batch axis and a channel axis, got shape {}", op, x_in.shape().str());
  int64_t c = x_in.dim(-1);
  for (const Tensor* p : {&gamma, &beta, static_cast<const Tensor*>(&moving_mean), static_cast<const Tensor*>(&moving_variance)})
    if (p->rank() != 1 || p->dim(0) != c) fail("{}: parameter has shape {}, expected ({},)", op, p->shape().str(), c);
  Tensor x = x_in.contiguous();
  int64_t rows = x.numel() / c;
  if (training && rows < 1) fail("{}: empty batch", op);
  const float* px = x.data<float>();
  Tensor mean_t = Tensor::empty({c}), rstd = Tensor::empty({c});
  float* mu = mean_t.data<float>();
  float* rs = rstd.data<float>();
  bool sync = training && cross_replica && synchronized;
  double global_rows = static_cast<double>(rows);
  auto cu = static_cast<size_t>(c);
  if (training) {
    std::vector<double> s(cu + 1, 0.0), s2(cu, 0.0);  // s: Σx per channel, then the row count
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < c; ++j) s[static_cast<size_t>(j)] += px[i * c + j];
    s[cu] = global_rows;
    if (sync) {
      cross_replica(s);
      global_rows = s[cu];
    }
    for (int64_t j = 0; j < c; ++j) mu[j] = static_cast<float>(s[static_cast<size_t>(j)] / global_rows);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < c; ++j) {
        double e = px[i * c + j] - mu[j];
        s2[static_cast<size_t>(j)] += e * e;
      }
    if (sync) cross_replica(s2);
    std::vector<float> var(cu);
    for (int64_t j = 0; j < c; ++j) {
      var[static_cast<size_t>(j)] = static_cast<float>(s2[static_cast<size_t>(j)] / global_rows);
      rs[j] = 1.0f / std::sqrt(var[static_cast<size_t>(j)] + epsilon);
    }
    // The statistics the moving averages move toward: the batch's, or with local statistics
    // under a strategy the replicas' average, so every replica's moving statistics agree.
    std::vector<float> toward_mean(mu, mu + c), toward_var = var;
    if (cross_replica && !synchronized) {
      std::vector<double> both(2 * cu);
      for (size_t j = 0; j < cu; ++j) both[j] = mu[j], both[cu + j] = var[j];
      double replicas = cross_replica(both);
      for (size_t j = 0; j < cu; ++j)
        toward_mean[j] = static_cast<float>(both[j] / replicas), toward_var[j] = static_cast<float>(both[cu + j] / replicas);
    }
    float* mm = moving_mean.data<float>();
    float* mv = moving_variance.data<float>();
    for (size_t j = 0; j < cu; ++j) {
      mm[j] = mm[j] * momentum + toward_mean[j] * (1.0f - momentum);
      mv[j] = mv[j] * momentum + toward_var[j] * (1.0f - momentum);
    }
  } else {
    for (int64_t j = 0; j < c; ++j) {
      mu[j] = moving_mean.data<float>()[j];
      rs[j] = 1.0f / std::sqrt(moving_variance.data<float>()[j] + epsilon);
    }
  }
  Tensor x_hat = Tensor::empty(x.shape()), y = Tensor::empty(x.shape());
  float* xh = x_hat.data<float>();
  float* py = y.data<float>();
  const float* ga = gamma.data<float>();
  const float* be = beta.data<float>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) {
      xh[i * c + j] = (px[i * c + j] - mu[j]) * rs[j];
      py[i * c + j] = ga[j] * xh[i * c + j] + be[j];
    }
  if (auto* tape = autograd::tracking_tape({&x_in, &gamma, &beta})) {
    auto* node = new BatchNormNode();
    node->x_hat = x_hat;
    node->gamma = gamma;
    node->rstd = rstd;
    node->training = training;
    if (sync) node->sync = cross_replica;
    node->global_rows = global_rows;
    autograd::record(tape, node, {&x_in, &gamma, &beta}, y);
  }
  return y;
}

}  // namespace tandem::ops
