// batch_norm: x:(R, C) viewed as rows of channels (any leading axes) -> (R, C);
//   training: y = γ·(x - μ_B)·rstd + β with batch mean μ_B and rstd = 1/sqrt(var_B + ε); the moving
//   statistics move toward the batch ones: m = m·momentum + μ_B·(1 - momentum) (Keras).
//   inference: the moving statistics replace the batch ones.
// backward (training): dx = rstd/R · (R·dx̂ - Σdx̂ - x̂·Σ(dx̂·x̂)), dx̂ = dy·γ; dγ = Σ dy·x̂; dβ = Σ dy.
#include <cmath>
#include <vector>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

struct BatchNormNode : autograd::Node {
  Tensor x_hat, gamma, rstd;
  bool training;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t c = gamma.dim(0), rows = x_hat.numel() / c;
    const float* g = dy.data<float>();
    const float* xh = x_hat.data<float>();
    std::vector<double> sum_dy(static_cast<size_t>(c), 0.0), sum_dy_xh(static_cast<size_t>(c), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < c; ++j) {
        sum_dy[static_cast<size_t>(j)] += g[i * c + j];
        sum_dy_xh[static_cast<size_t>(j)] += g[i * c + j] * xh[i * c + j];
      }
    if (needs(0)) {
      Tensor dx = Tensor::empty(x_hat.shape());
      float* d = dx.data<float>();
      const float* ga = gamma.data<float>();
      const float* rs = rstd.data<float>();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < c; ++j) {
          auto ju = static_cast<size_t>(j);
          float scale = ga[j] * rs[j];
          d[i * c + j] = training ? scale * (g[i * c + j] - static_cast<float>(sum_dy[ju] / static_cast<double>(rows)) -
                                             xh[i * c + j] * static_cast<float>(sum_dy_xh[ju] / static_cast<double>(rows)))
                                  : scale * g[i * c + j];
        }
      tape.accumulate(input_slots[0], dx);
    }
    if (needs(1)) {
      Tensor dg = Tensor::empty({c});
      for (int64_t j = 0; j < c; ++j) dg.data<float>()[j] = static_cast<float>(sum_dy_xh[static_cast<size_t>(j)]);
      tape.accumulate(input_slots[1], dg);
    }
    if (needs(2)) {
      Tensor db = Tensor::empty({c});
      for (int64_t j = 0; j < c; ++j) db.data<float>()[j] = static_cast<float>(sum_dy[static_cast<size_t>(j)]);
      tape.accumulate(input_slots[2], db);
    }
  }
};

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, Tensor& moving_mean,
                  Tensor& moving_variance, float momentum, float epsilon, bool training) {
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
  if (training) {
    std::vector<double> s(static_cast<size_t>(c), 0.0), s2(static_cast<size_t>(c), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < c; ++j) s[static_cast<size_t>(j)] += px[i * c + j];
    for (int64_t j = 0; j < c; ++j) mu[j] = static_cast<float>(s[static_cast<size_t>(j)] / static_cast<double>(rows));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < c; ++j) {
        double e = px[i * c + j] - mu[j];
        s2[static_cast<size_t>(j)] += e * e;
      }
    float* mm = moving_mean.data<float>();
    float* mv = moving_variance.data<float>();
    for (int64_t j = 0; j < c; ++j) {
      float var = static_cast<float>(s2[static_cast<size_t>(j)] / static_cast<double>(rows));
      rs[j] = 1.0f / std::sqrt(var + epsilon);
      mm[j] = mm[j] * momentum + mu[j] * (1.0f - momentum);
      mv[j] = mv[j] * momentum + var * (1.0f - momentum);
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
    autograd::record(tape, node, {&x_in, &gamma, &beta}, y);
  }
  return y;
}

}  // namespace tandem::ops
