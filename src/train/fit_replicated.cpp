// Training under a multi-replica strategy. MirroredStrategy: replicas are deep copies of the
// model, each on its own thread; gradients meet in one all-reduce per step, fused into a single
// buffer; every replica applies the same update, so the variables stay mirrored.
// CentralStorageStrategy: replicas share the one set of variables (shallow copies of the
// layers); after the all-reduce only replica 0 applies the update, once.
#include <cstring>

#include "tandem/model.h"

namespace tandem {

struct Sequential::Replica {
  std::vector<std::shared_ptr<layers::Layer>> layers;  // replica 0: the model's own
  std::vector<Variable*> variables, trainable;
  std::vector<Tensor> sources, grads;
  std::vector<float> bucket;  // every gradient, back to back
  uint64_t training_calls = 0;
  double loss_sum = 0.0;
};

void Sequential::make_replicas() {
  int n = strategy_->num_replicas_in_sync();
  bool mirrored = strategy_->mirrors_variables();
  replicas_.clear();
  for (int r = 0; r < n; ++r) {
    auto rep = std::make_shared<Replica>();
    for (const auto& l : layers_) {
      rep->layers.push_back(r == 0 ? l : mirrored ? l->replicate() : l->clone());
      // Central storage shares the trainable variables only: each replica updates its own copy
      // of the moving statistics (to the same values, from the replicas' common statistics).
      if (r > 0 && !mirrored)
        for (auto& v : rep->layers.back()->variables())
          if (!v.trainable) v.value = v.value.clone();
    }
    int64_t total = 0;
    for (auto& l : rep->layers)
      for (auto& v : l->variables()) {
        rep->variables.push_back(&v);
        if (!v.trainable) continue;
        rep->trainable.push_back(&v);
        rep->sources.push_back(v.value);
        total += v.value.numel();
      }
    rep->grads.resize(rep->trainable.size());
    rep->bucket.resize(static_cast<size_t>(total));
    replicas_.push_back(rep);
  }
  if (optimizer_) optimizer_->forget_replicas();
}

Sequential::Replica* Sequential::running_replica(const Tensor* first_input) {
  const distribute::ReplicaContext* context = distribute::replica_context();
  if (context == nullptr || context->num_replicas_in_sync() == 1) return nullptr;
  if (context->strategy != strategy_)
    fail("Sequential \"{}\": used inside {}.run but made outside its scope; make the model inside "
         "`auto scope = strategy.scope();` so that its variables are distributed",
         name_, context->strategy->name());
  std::lock_guard lock(replicas_mutex_);
  if (!built()) {
    if (first_input == nullptr)
      fail("Sequential \"{}\": not built yet; call it on a batch (or build()) before asking for its variables", name_);
    if (first_input->rank() < 2)
      fail("Sequential \"{}\": input needs a batch axis, got shape {}", name_, first_input->shape().str());
    build(Shape(std::span<const int64_t>(first_input->shape().begin() + 1, first_input->shape().end())));
  }
  if (static_cast<int>(replicas_.size()) != context->num_replicas_in_sync()) make_replicas();
  return replicas_[static_cast<size_t>(context->replica_id)].get();
}

Tensor Sequential::operator()(const Tensor& x, bool training) {
  Replica* rep = running_replica(&x);
  if (rep == nullptr) return call(x, CallContext{training, {seed_, training ? training_calls_++ : 0, 0}});
  if (!x.defined()) fail("Sequential \"{}\": input is undefined", name_);
  // Replicas see consecutive slices of the global batch, so with even splits each sample gets
  // the dropout mask it would get on one device.
  int64_t offset = x.dim(0) * distribute::replica_context()->replica_id;
  CallContext ctx{training, {seed_, training ? rep->training_calls++ : 0, offset}};
  Tensor h = x;
  for (auto& layer : rep->layers) h = layer->call(h, ctx);
  return h;
}

std::vector<Variable*> Sequential::variables() {
  if (Replica* rep = running_replica(nullptr)) return rep->variables;
  std::vector<Variable*> out;
  for (auto& l : layers_)
    for (auto& v : l->variables()) out.push_back(&v);
  return out;
}

std::vector<Variable*> Sequential::replica_variables(int replica) {
  if (replica == 0) return variables();
  if (replica < 0 || replica >= static_cast<int>(replicas_.size()))
    fail("replica_variables: replica {} does not exist ({} replicas made)", replica, replicas_.size());
  return replicas_[static_cast<size_t>(replica)]->variables;
}

double Sequential::replicated_step(const Tensor& x, const Tensor& y, uint64_t step_key, std::vector<Tensor>& predictions) {
  int n = strategy_->num_replicas_in_sync();
  if (static_cast<int>(replicas_.size()) != n) make_replicas();
  int64_t global = x.dim(0);
  predictions.resize(static_cast<size_t>(n));
  float scale = 1.0f / static_cast<float>(global);
  strategy_->for_each_replica([&](int r) {
    Replica& rep = *replicas_[static_cast<size_t>(r)];
    int64_t begin = global * r / n, end = global * (r + 1) / n;
    Tensor xr = x.slice(begin, end), yr = y.slice(begin, end);
    CallContext ctx{true, RandomKey{seed_, step_key, begin}};
    GradientTape tape;
    Tensor h = xr;
    for (auto& layer : rep.layers) h = layer->call(h, ctx);
    Tensor per_sample = loss_->per_sample(yr, h);
    Tensor loss = ops::scale(ops::sum(per_sample), scale);
    tape.gradient(loss, rep.sources, rep.grads);
    size_t at = 0;
    for (const Tensor& g : rep.grads) {
      Tensor c = g.contiguous();
      std::memcpy(rep.bucket.data() + at, c.data<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
      at += static_cast<size_t>(c.numel());
    }
    strategy_->communicator().all_reduce_sum(r, rep.bucket.data(), static_cast<int64_t>(rep.bucket.size()));
    at = 0;
    for (Tensor& g : rep.grads) {
      Tensor out = Tensor::empty(g.shape());
      std::memcpy(out.data<float>(), rep.bucket.data() + at, static_cast<size_t>(g.numel()) * sizeof(float));
      at += static_cast<size_t>(g.numel());
      g = out;
    }
    optimizer_->apply_reduced(*distribute::replica_context(), rep.trainable, rep.grads);
    rep.loss_sum = ops::sum(per_sample).item();
    predictions[static_cast<size_t>(r)] = h;
  });
  double loss_sum = 0.0;  // in replica order, so the figure does not depend on timing
  for (const auto& rep : replicas_) loss_sum += rep->loss_sum;
  return loss_sum;
}

}  // namespace tandem
