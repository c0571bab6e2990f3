// Training under a multi-replica strategy. MirroredStrategy: replicas are deep copies of the
// model, each on its own thread; gradients meet in one all-reduce per step, fused into a single
// buffer; every replica applies the same update, so the variables stay mirrored.
// CentralStorageStrategy: replicas share the one set of variables (shallow copies of the
// layers); after the all-reduce only replica 0 applies the update, once.
#include <cstring>

#include "tandem/model.h"

namespace tandem {

struct Sequential::Replica {
  std::vector<std::shared_ptr<layers::Layer>> layers;  // empty for replica 0 (the model's own)
  std::unique_ptr<Optimizer> optimizer;                 // null for replica 0
  std::vector<Variable*> trainable;
  std::vector<Tensor> sources, grads;
  std::vector<float> bucket;  // every gradient, back to back
  double loss_sum = 0.0;
};

void Sequential::make_replicas() {
  int n = strategy_->num_replicas_in_sync();
  bool mirrored = strategy_->mirrors_variables();
  for (const auto& l : layers_)
    if (l->type() == "BatchNormalization")
      fail("{}: BatchNormalization under {} needs synchronized batch statistics, which Tandem does not have yet",
           l->label(), strategy_->name());
  replicas_.clear();
  for (int r = 0; r < n; ++r) {
    auto rep = std::make_shared<Replica>();
    if (r > 0)
      for (const auto& l : layers_) rep->layers.push_back(mirrored ? l->replicate() : l->clone());
    for (auto& l : (r == 0 ? layers_ : rep->layers))
      for (auto& v : l->variables())
        if (v.trainable) rep->trainable.push_back(&v);
    if (r == 0) optimizer_->build(rep->trainable);  // slots exist before they are copied
    else if (mirrored) rep->optimizer = optimizer_->replicate(rep->trainable);
    int64_t total = 0;
    for (Variable* v : rep->trainable) {
      rep->sources.push_back(v->value);
      total += v->value.numel();
    }
    rep->grads.resize(rep->trainable.size());
    rep->bucket.resize(static_cast<size_t>(total));
    replicas_.push_back(rep);
  }
}

std::vector<Variable*> Sequential::replica_variables(int replica) {
  if (replica == 0) return variables();
  if (replica < 0 || replica >= static_cast<int>(replicas_.size()))
    fail("replica_variables: replica {} does not exist ({} replicas made)", replica, replicas_.size());
  std::vector<Variable*> out;
  for (auto& l : replicas_[static_cast<size_t>(replica)]->layers)
    for (auto& v : l->variables()) out.push_back(&v);
  return out;
}

double Sequential::replicated_step(const Tensor& x, const Tensor& y, uint64_t step_key, std::vector<Tensor>& predictions) {
  int n = strategy_->num_replicas_in_sync();
  if (static_cast<int>(replicas_.size()) != n) make_replicas();
  int64_t global = x.dim(0);
  predictions.resize(static_cast<size_t>(n));
  distribute::Communicator& comm = strategy_->communicator();
  float scale = 1.0f / static_cast<float>(global);
  strategy_->run([&](int r) {
    Replica& rep = *replicas_[static_cast<size_t>(r)];
    int64_t begin = global * r / n, end = global * (r + 1) / n;
    Tensor xr = x.slice(begin, end), yr = y.slice(begin, end);
    CallContext ctx{true, RandomKey{seed_, step_key, begin}};
    GradientTape tape;
    Tensor h = xr;
    for (auto& layer : (r == 0 ? layers_ : rep.layers)) h = layer->call(h, ctx);
    Tensor per_sample = loss_->per_sample(yr, h);
    Tensor loss = ops::scale(ops::sum(per_sample), scale);
    tape.gradient(loss, rep.sources, rep.grads);
    size_t at = 0;
    for (const Tensor& g : rep.grads) {
      Tensor c = g.contiguous();
      std::memcpy(rep.bucket.data() + at, c.data<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
      at += static_cast<size_t>(c.numel());
    }
    comm.all_reduce_sum(r, rep.bucket.data(), static_cast<int64_t>(rep.bucket.size()));
    at = 0;
    for (Tensor& g : rep.grads) {
      Tensor out = Tensor::empty(g.shape());
      std::memcpy(out.data<float>(), rep.bucket.data() + at, static_cast<size_t>(g.numel()) * sizeof(float));
      at += static_cast<size_t>(g.numel());
      g = out;
    }
    // Every replica is past its backward pass (the all-reduce waited for all), so with central
    // storage replica 0 may update the shared variables while the others return.
    if (r == 0) optimizer_->apply(rep.trainable, rep.grads);
    else if (rep.optimizer) rep.optimizer->apply(rep.trainable, rep.grads);
    rep.loss_sum = ops::sum(per_sample).item();
    predictions[static_cast<size_t>(r)] = h;
  });
  double loss_sum = 0.0;  // in replica order, so the figure does not depend on timing
  for (const auto& rep : replicas_) loss_sum += rep->loss_sum;
  return loss_sum;
}

}  // namespace tandem
