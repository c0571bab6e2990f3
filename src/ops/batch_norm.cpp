// batch_norm: x:(R, C) viewed as rows of channels (any leading axes) -> (R, C);
//   training: y = γ·(x - μ_B)·rstd + β with batch mean μ_B and rstd = 1/sqrt(var_B + ε); the moving
//   statistics move toward the batch ones: m = m·momentum + μ_B·(1 - momentum) (Keras).
//   inference: the moving statistics replace the batch ones.
// backward (training): dx = rstd/R · (R·dx̂ - Σdx̂ - x̂·Σ(dx̂·x̂)), dx̂ = dy·γ; dγ = Σ dy·x̂; dβ = Σ dy.
// Synchronized across replicas, R and the sums in dx run over the global batch (one collective
// each for the mean, the variance and the two backward sums); dγ and dβ stay the replica's own
// (the gradient all-reduce sums them).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/checks.h"

namespace tandem::ops {
namespace {

kernels::Backend& on(const Tensor& t) { return kernels::backend(t.device()); }

// Per channel: Σdy, then Σdy·x̂ (2c values), over the rows in order.
std::vector<double> backward_sums(const Tensor& dy, const Tensor& x_hat, int64_t c) {
  std::vector<double> sums(2 * static_cast<size_t>(c));
  on(dy).batch_norm_backward_sums(dy.buffer<float>(), x_hat.buffer<float>(), x_hat.numel() / c, c, sums.data());
  return sums;
}

// dx = γ·rstd · (dy - Σdy/n - x̂·Σ(dy·x̂)/n), the sums over n rows (2c values as backward_sums).
Tensor input_gradient(const Tensor& dy, const Tensor& x_hat, const Tensor& gamma, const Tensor& rstd,
                      const double* sums, double n) {
  int64_t c = gamma.dim(0), rows = x_hat.numel() / c;
  Tensor dx = Tensor::empty(x_hat.shape(), DType::Float32, dy.device());
  on(dy).batch_norm_input_gradient(dy.buffer<float>(), x_hat.buffer<float>(), gamma.buffer<float>(),
                                   rstd.buffer<float>(), sums, n, dx.buffer<float>(), rows, c);
  return dx;
}

// c per-channel values, computed on the host, as a tensor on `device`.
Tensor channel_tensor(std::span<const float> values, Device device) {
  return Tensor::from_vector({static_cast<int64_t>(values.size())}, values).to(device);
}
Tensor channel_tensor(const double* values, int64_t c, Device device) {
  std::vector<float> v(static_cast<size_t>(c));
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(values[j]);
  return channel_tensor(v, device);
}

// Per channel Σx over the rows in order, then the row count (c + 1 values).
std::vector<double> channel_sums(const Tensor& x, int64_t rows, int64_t c) {
  std::vector<double> s(static_cast<size_t>(c) + 1, 0.0);
  on(x).channel_sums(x.buffer<float>(), rows, c, s.data());
  s[static_cast<size_t>(c)] = static_cast<double>(rows);
  return s;
}

// Per channel Σ(x - μ)².
std::vector<double> squared_deviations(const Tensor& x, const Tensor& mean, int64_t rows, int64_t c) {
  std::vector<double> s(static_cast<size_t>(c), 0.0);
  on(x).squared_deviations(x.buffer<float>(), mean.buffer<float>(), rows, c, s.data());
  return s;
}

void move_toward(Tensor& moving, std::span<const float> value, float momentum) {
  Tensor v = channel_tensor(value, moving.device());
  on(moving).moving_average(moving.buffer<float>(), v.buffer<float>(), moving.numel(), momentum);
}

// The moving statistics toward these, now or when `deferred` (if any) applies.
void move_both(Tensor& moving_mean, Tensor& moving_variance, std::span<const float> mean,
               std::span<const float> variance, float momentum, DeferredMovingStatistics* deferred) {
  if (deferred != nullptr) return deferred->add(moving_mean, moving_variance, mean, variance, momentum);
  move_toward(moving_mean, mean, momentum);
  move_toward(moving_variance, variance, momentum);
}

// x̂ = (x - μ)·rstd, y = γ·x̂ + β.
void normalize(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma, const Tensor& beta,
               Tensor& x_hat, Tensor& y) {
  int64_t c = gamma.dim(0), rows = x.numel() / c;
  x_hat = Tensor::empty(x.shape(), DType::Float32, x.device());
  y = Tensor::empty(x.shape(), DType::Float32, x.device());
  on(x).batch_norm_normalize(x.buffer<float>(), mean.buffer<float>(), rstd.buffer<float>(), gamma.buffer<float>(),
                             beta.buffer<float>(), x_hat.buffer<float>(), y.buffer<float>(), rows, c);
}

// Sums values elementwise over the replicas, in place; returns the number of replicas.
using CrossReplicaSum = std::function<int(std::span<double> values)>;

struct BatchNormNode : autograd::Node {
  Tensor x_hat, gamma, rstd;
  bool training;
  CrossReplicaSum sync;  // set when synchronized
  double global_rows = 0;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t c = gamma.dim(0);
    std::vector<double> local = backward_sums(dy, x_hat, c);
    if (needs(0)) {
      if (training) {
        std::vector<double> sums = local;
        double n = static_cast<double>(x_hat.numel() / c);
        if (sync) {
          sync(sums);
          n = global_rows;
        }
        tape.accumulate(input_slots[0], input_gradient(dy, x_hat, gamma, rstd, sums.data(), n));
      } else {
        Tensor dx = Tensor::empty(x_hat.shape(), DType::Float32, dy.device());
        on(dy).scale_by_channels(dy.buffer<float>(), gamma.buffer<float>(), rstd.buffer<float>(), dx.buffer<float>(),
                                 x_hat.numel(), c);
        tape.accumulate(input_slots[0], dx);
      }
    }
    if (needs(1)) tape.accumulate(input_slots[1], channel_tensor(local.data() + c, c, dy.device()));
    if (needs(2)) tape.accumulate(input_slots[2], channel_tensor(local.data(), c, dy.device()));
  }
};

// One step's batch_norm_parts on one replica (synchronized). Backward meets the parts' nodes
// last part first; each hands in its output gradient and sums, and the last to arrive gathers
// every part's sums and gives each part its input gradient.
struct PartsBackward : BatchNormPartsBackward {
  GatherParts gather;
  size_t per_part = 0;  // 2c: Σdy, Σdy·x̂
  double global_rows = 0;
  size_t recorded = 0, arrived = 0;
  bool exchanged = false;
  std::vector<double> sums;  // recorded parts × per_part, in part order
  struct Part {
    Tensor dy, x_hat, gamma, rstd;
    int32_t input_slot = -1;
  };
  std::vector<Part> parts;

  void exchange(GradientTape* tape) {
    exchanged = true;
    std::vector<double> all = gather(sums, per_part);
    std::vector<double> total(per_part, 0.0);
    for (size_t p = 0; p < all.size() / per_part; ++p)
      for (size_t j = 0; j < per_part; ++j) total[j] += all[p * per_part + j];
    for (Part& part : parts) {
      if (tape != nullptr && part.input_slot >= 0)
        tape->accumulate(part.input_slot,
                         input_gradient(part.dy, part.x_hat, part.gamma, part.rstd, total.data(), global_rows));
      part.dy = Tensor();
    }
  }

  void finish() override {
    if (exchanged) return;
    if (recorded > 0) fail("batch_norm_parts: backward reached {} of this replica's {} parts", arrived, recorded);
    exchange(nullptr);
  }
};

struct BatchNormPartNode : autograd::Node {
  std::shared_ptr<PartsBackward> shared;
  size_t part = 0;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    PartsBackward::Part& p = shared->parts[part];
    p.dy = dy_in.contiguous();
    p.input_slot = input_slots[0];
    int64_t c = p.gamma.dim(0);
    std::vector<double> local = backward_sums(p.dy, p.x_hat, c);
    std::copy(local.begin(), local.end(), shared->sums.begin() + static_cast<std::ptrdiff_t>(part * shared->per_part));
    if (needs(1)) tape.accumulate(input_slots[1], channel_tensor(local.data() + c, c, p.dy.device()));
    if (needs(2)) tape.accumulate(input_slots[2], channel_tensor(local.data(), c, p.dy.device()));
    if (++shared->arrived == shared->recorded) shared->exchange(&tape);
  }
};

void check_parameters(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                      const Tensor& moving_mean, const Tensor& moving_variance) {
  require_float(x, op, "x");
  require_float(gamma, op, "gamma");
  require_float(beta, op, "beta");
  require_device(gamma, x, op, "gamma");
  require_device(beta, x, op, "beta");
  require_device(moving_mean, x, op, "moving_mean");
  require_device(moving_variance, x, op, "moving_variance");
  if (x.rank() < 2) fail("{}: x needs a batch axis and a channel axis, got shape {}", op, x.shape().str());
  int64_t c = x.dim(-1);
  for (const Tensor* p : {&gamma, &beta, &moving_mean, &moving_variance})
    if (p->rank() != 1 || p->dim(0) != c) fail("{}: parameter has shape {}, expected ({},)", op, p->shape().str(), c);
}

}  // namespace

void DeferredMovingStatistics::add(Tensor& moving_mean, Tensor& moving_variance, std::span<const float> mean,
                                   std::span<const float> variance, float momentum) {
  auto it = std::find_if(layers_.begin(), layers_.end(),
                         [&](const Layer& l) { return l.moving_mean.id() == moving_mean.id(); });
  if (it == layers_.end()) {
    layers_.push_back({moving_mean, moving_variance, momentum, std::vector<double>(2 * mean.size() + 1, 0.0)});
    it = layers_.end() - 1;
  }
  for (size_t j = 0; j < mean.size(); ++j) it->sums[j] += mean[j], it->sums[mean.size() + j] += variance[j];
  it->sums.back() += 1.0;
}

std::vector<double> DeferredMovingStatistics::sums(const Tensor& moving_mean, int64_t channels) const {
  for (const Layer& l : layers_)
    if (l.moving_mean.id() == moving_mean.id()) return l.sums;
  return std::vector<double>(2 * static_cast<size_t>(channels) + 1, 0.0);
}

void DeferredMovingStatistics::move(Tensor& moving_mean, Tensor& moving_variance, std::span<const double> sums,
                                    float momentum) {
  double calls = sums.back();
  if (calls < 1.0) return;
  size_t c = sums.size() / 2;
  std::vector<float> mean(c), variance(c);
  for (size_t j = 0; j < c; ++j)
    mean[j] = static_cast<float>(sums[j] / calls), variance[j] = static_cast<float>(sums[c + j] / calls);
  move_toward(moving_mean, mean, momentum);
  move_toward(moving_variance, variance, momentum);
}

void DeferredMovingStatistics::apply() {
  for (Layer& l : layers_) move(l.moving_mean, l.moving_variance, l.sums, l.momentum);
  layers_.clear();
}

Tensor batch_norm(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, Tensor& moving_mean,
                  Tensor& moving_variance, float momentum, float epsilon, bool training,
                  const distribute::ReplicaContext* replicas, bool synchronized, DeferredMovingStatistics* deferred) {
  const char* op = "batch_norm";
  CrossReplicaSum cross_replica;
  if (training && replicas != nullptr && replicas->batch_group != nullptr && replicas->batch_group->size() > 1)
    cross_replica = [group = replicas->batch_group](std::span<double> values) {
      group->all_reduce(values);
      return group->size();
    };
  check_parameters(op, x_in, gamma, beta, moving_mean, moving_variance);
  int64_t c = x_in.dim(-1);
  Tensor x = x_in.contiguous();
  int64_t rows = x.numel() / c;
  // A replica whose share of a short global batch is empty still takes part in the collectives.
  if (training && rows < 1 && !cross_replica) fail("{}: empty batch", op);
  auto cu = static_cast<size_t>(c);
  std::vector<float> mu(cu), rs(cu);  // per channel, on the host
  Tensor mean_t, rstd;
  bool sync = training && cross_replica && synchronized;
  double global_rows = static_cast<double>(rows);
  if (training) {
    std::vector<double> s = channel_sums(x, rows, c);
    if (sync) {
      cross_replica(s);
      global_rows = s[cu];
      if (global_rows < 1) fail("{}: empty batch on every replica", op);
    }
    bool none = rows < 1 && !sync;  // this replica's own statistics are of nothing: zeros, left out below
    for (size_t j = 0; j < cu; ++j) mu[j] = none ? 0.0f : static_cast<float>(s[j] / global_rows);
    mean_t = channel_tensor(mu, x.device());
    std::vector<double> s2 = squared_deviations(x, mean_t, rows, c);
    if (sync) cross_replica(s2);
    std::vector<float> var(cu);
    for (size_t j = 0; j < cu; ++j) {
      var[j] = none ? 0.0f : static_cast<float>(s2[j] / global_rows);
      rs[j] = 1.0f / std::sqrt(var[j] + epsilon);
    }
    // The statistics the moving averages move toward: the batch's, or with local statistics
    // under a strategy the average over the replicas that had rows, so every replica's moving
    // statistics agree.
    std::vector<float> toward_mean = mu, toward_var = var;
    if (cross_replica && !synchronized) {
      std::vector<double> both(2 * cu + 1);
      for (size_t j = 0; j < cu; ++j) both[j] = mu[j], both[cu + j] = var[j];
      both[2 * cu] = none ? 0.0 : 1.0;
      cross_replica(both);
      double with_rows = both[2 * cu];
      if (with_rows < 1) fail("{}: empty batch on every replica", op);
      for (size_t j = 0; j < cu; ++j)
        toward_mean[j] = static_cast<float>(both[j] / with_rows),
        toward_var[j] = static_cast<float>(both[cu + j] / with_rows);
    }
    move_both(moving_mean, moving_variance, toward_mean, toward_var, momentum, deferred);
  } else {
    Tensor mm = moving_mean.to(Device::cpu()), mv = moving_variance.to(Device::cpu());
    for (size_t j = 0; j < cu; ++j) {
      mu[j] = mm.data<float>()[j];
      rs[j] = 1.0f / std::sqrt(mv.data<float>()[j] + epsilon);
    }
    mean_t = channel_tensor(mu, x.device());
  }
  rstd = channel_tensor(rs, x.device());
  Tensor x_hat, y;
  normalize(x, mean_t, rstd, gamma, beta, x_hat, y);
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

std::vector<Tensor> batch_norm_parts(std::span<const Tensor> xs, std::span<const Tensor> gammas,
                                     std::span<const Tensor> betas, Tensor& moving_mean, Tensor& moving_variance,
                                     float momentum, float epsilon, bool synchronized, const GatherParts& gather,
                                     std::shared_ptr<BatchNormPartsBackward>& pending) {
  const char* op = "batch_norm_parts";
  if (gammas.size() != xs.size() || betas.size() != xs.size())
    fail("{}: {} parts but {} gammas and {} betas", op, xs.size(), gammas.size(), betas.size());
  int64_t c = moving_mean.numel();
  auto cu = static_cast<size_t>(c);
  std::vector<Tensor> x(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    check_parameters(op, xs[i], gammas[i], betas[i], moving_mean, moving_variance);
    x[i] = xs[i].contiguous();
  }
  auto rows = [&](size_t i) { return x[i].numel() / c; };
  // Each part's statistics: mean and variance (synchronized: the global ones, the same for all).
  std::vector<Tensor> mean(xs.size()), rstd(xs.size());
  std::vector<float> toward_mean(cu), toward_var(cu);
  double global_rows = 0;
  if (synchronized) {
    std::vector<double> mine;
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> s = channel_sums(x[i], rows(i), c);
      mine.insert(mine.end(), s.begin(), s.end());
    }
    std::vector<double> all = gather(mine, cu + 1), total(cu + 1, 0.0);
    for (size_t p = 0; p < all.size() / (cu + 1); ++p)
      for (size_t j = 0; j <= cu; ++j) total[j] += all[p * (cu + 1) + j];
    global_rows = total[cu];
    if (global_rows < 1) fail("{}: empty batch", op);
    for (size_t j = 0; j < cu; ++j) toward_mean[j] = static_cast<float>(total[j] / global_rows);
    Tensor mu = channel_tensor(toward_mean, moving_mean.device());
    mine.clear();
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> s2 = squared_deviations(x[i], mu, rows(i), c);
      mine.insert(mine.end(), s2.begin(), s2.end());
    }
    all = gather(mine, cu);
    std::vector<double> deviations(cu, 0.0);
    for (size_t p = 0; p < all.size() / cu; ++p)
      for (size_t j = 0; j < cu; ++j) deviations[j] += all[p * cu + j];
    std::vector<float> host_rs(cu);
    for (size_t j = 0; j < cu; ++j) {
      toward_var[j] = static_cast<float>(deviations[j] / global_rows);
      host_rs[j] = 1.0f / std::sqrt(toward_var[j] + epsilon);
    }
    Tensor rs = channel_tensor(host_rs, moving_mean.device());
    for (size_t i = 0; i < x.size(); ++i) mean[i] = mu, rstd[i] = rs;
  } else {
    // Ghost batches: each part its own statistics; the moving ones follow the parts' average.
    std::vector<double> mine;
    for (size_t i = 0; i < x.size(); ++i) {
      if (rows(i) < 1) fail("{}: part {} is empty", op, i);
      std::vector<double> s = channel_sums(x[i], rows(i), c);
      std::vector<float> mu(cu), rs(cu);
      for (size_t j = 0; j < cu; ++j) mu[j] = static_cast<float>(s[j] / static_cast<double>(rows(i)));
      mean[i] = channel_tensor(mu, x[i].device());
      std::vector<double> s2 = squared_deviations(x[i], mean[i], rows(i), c);
      mine.push_back(1.0);  // a part with rows
      for (size_t j = 0; j < cu; ++j) {
        float var = static_cast<float>(s2[j] / static_cast<double>(rows(i)));
        rs[j] = 1.0f / std::sqrt(var + epsilon);
        mine.push_back(mu[j]);
        mine.push_back(var);
      }
      rstd[i] = channel_tensor(rs, x[i].device());
    }
    std::vector<double> all = gather(mine, 2 * cu + 1), total(2 * cu + 1, 0.0);
    for (size_t p = 0; p < all.size() / (2 * cu + 1); ++p)
      for (size_t j = 0; j < 2 * cu + 1; ++j) total[j] += all[p * (2 * cu + 1) + j];
    for (size_t j = 0; j < cu; ++j) {
      toward_mean[j] = static_cast<float>(total[1 + 2 * j] / total[0]);
      toward_var[j] = static_cast<float>(total[2 + 2 * j] / total[0]);
    }
  }
  move_both(moving_mean, moving_variance, toward_mean, toward_var, momentum, nullptr);

  std::vector<Tensor> y(x.size());
  auto shared = std::make_shared<PartsBackward>();
  shared->gather = gather;
  shared->per_part = 2 * cu;
  shared->global_rows = global_rows;
  for (size_t i = 0; i < x.size(); ++i) {
    Tensor x_hat;
    normalize(x[i], mean[i], rstd[i], gammas[i], betas[i], x_hat, y[i]);
    auto* tape = autograd::tracking_tape({&xs[i], &gammas[i], &betas[i]});
    if (tape == nullptr) continue;
    if (!synchronized) {  // a part on its own: plain batch norm backward
      auto* node = new BatchNormNode();
      node->x_hat = x_hat;
      node->gamma = gammas[i];
      node->rstd = rstd[i];
      node->training = true;
      autograd::record(tape, node, {&xs[i], &gammas[i], &betas[i]}, y[i]);
      continue;
    }
    auto* node = new BatchNormPartNode();
    node->shared = shared;
    node->part = shared->recorded++;
    shared->parts.push_back({Tensor(), x_hat, gammas[i], rstd[i], -1});
    autograd::record(tape, node, {&xs[i], &gammas[i], &betas[i]}, y[i]);
  }
  shared->sums.assign(shared->recorded * shared->per_part, 0.0);
  if (synchronized) pending = shared;
  else pending.reset();
  return y;
}

}  // namespace tandem::ops
