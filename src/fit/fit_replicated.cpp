// Training under a multi-replica strategy. MirroredStrategy: replicas are deep copies of the
// model, each on its own thread; gradients meet in one all-reduce per step, fused into a single
// buffer; every replica applies the same update, so the variables stay mirrored.
// CentralStorageStrategy: replicas share the one set of variables (shallow copies of the
// layers); after the all-reduce only replica 0 applies the update, once.
#include <algorithm>
#include <cstring>
#include <span>

#include "core/vectorize.h"
#include "tandem/model.h"

namespace tandem {

struct Sequential::Replica {
  std::vector<std::shared_ptr<layers::Layer>> layers;  // replica 0: the model's own
  std::vector<Variable*> variables, trainable;
  std::vector<Tensor> sources, grads;
  Tensor bucket;  // every gradient, back to back (deterministic: one set per micro-batch; else only with bucket_bytes)
  std::vector<Tensor> reduced;   // views of the bucket's first set: the summed gradients
  std::vector<float> gathered;   // deterministic: every replica's bucket
  std::vector<int64_t> offsets;  // of each gradient in the bucket
  std::vector<bool> done;
  std::vector<std::span<float>> buffers;  // the gradients, for the grouped all-reduce
  uint64_t training_calls = 0;
};

void Sequential::make_replicas() {
  int n = strategy_->num_replicas_in_sync();
  int micro = strategy_->deterministic_micro_batches();
  replicas_.clear();
  for (int r = 0; r < n; ++r) {
    auto rep = std::make_shared<Replica>();
    for (const auto& l : layers_) rep->layers.push_back(r == 0 ? l : strategy_->replica_layer(*l, r));
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
    // A bucket only where gradients are packed: deterministic mode and reducing during backward
    // (otherwise, and in custom loops, the gradients are reduced where backward left them).
    if (micro > 0) {
      int per_replica = (micro + n - 1) / n;
      rep->bucket = Tensor::empty({total * per_replica});
      rep->gathered.resize(static_cast<size_t>(total * per_replica * n));
    } else if (strategy_->bucket_bytes() > 0) {
      rep->bucket = Tensor::empty({total});
    }
    int64_t at = 0;
    for (const Tensor& source : rep->sources) {
      rep->offsets.push_back(at);
      if (rep->bucket.defined())
        rep->reduced.push_back(rep->bucket.slice(at, at + source.numel()).reshape(source.shape()));
      at += source.numel();
    }
    replicas_.push_back(rep);
  }
  if (optimizer_) optimizer_->forget_replicas();
}

Sequential::Replica* Sequential::running_replica(const Tensor* first_input) {
  const distribute::ReplicaContext* context = distribute::replica_context();
  if (context == nullptr || context->num_replicas_in_sync() == 1) return nullptr;
  if (context->strategy != strategy_)
    fail(
        "Sequential \"{}\": used inside {}.run but made outside its scope; make the model inside "
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
  // Replicas see consecutive slices of the global batch: each sample gets the dropout mask it
  // would get on one device (from the slice's first row when run was given a split batch, else
  // assuming even splits).
  const distribute::ReplicaContext* context = distribute::replica_context();
  int64_t offset = context->first_row >= 0 ? context->first_row : x.dim(0) * context->replica_id;
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

namespace {
TANDEM_VECTORIZE void add_in_place(float* out, const float* g, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] += g[i];
}

// Whether gradient i is contiguous and shares no memory with the others (backward may hand one
// tensor to two sources), so that it can be reduced in place.
bool owns_memory(const std::vector<Tensor>& grads, size_t i) {
  if (!grads[i].is_contiguous()) return false;
  const float* b = grads[i].data<float>();
  const float* e = b + grads[i].numel();
  for (size_t j = 0; j < grads.size(); ++j) {
    if (j == i) continue;
    const float* ob = grads[j].data<float>();
    if (b < ob + grads[j].numel() && ob < e) return false;
  }
  return true;
}

// Rows [B·p/P, B·(p+1)/P) of a batch of B rows cut in P parts.
int64_t part_begin(int64_t rows, int p, int parts) { return rows * p / parts; }
}  // namespace

// The global batch is cut into parts: one per replica, or in deterministic mode a fixed number
// of micro-batches (replica r computes parts [P·r/N, P·(r+1)/N)). Each part's gradient is of its
// loss summed over its rows ÷ the global batch.
double Sequential::replicated_step(const Batch& batch, uint64_t step_key, std::vector<Tensor>& predictions,
                                   std::vector<Tensor>& labels) {
  int n = strategy_->num_replicas_in_sync();
  if (static_cast<int>(replicas_.size()) != n) make_replicas();
  int micro = strategy_->deterministic_micro_batches();
  int parts = micro > 0 ? micro : n;
  int64_t global = batch.rows;
  predictions.assign(static_cast<size_t>(parts), Tensor());
  labels.assign(static_cast<size_t>(parts), Tensor());
  part_losses_.assign(static_cast<size_t>(parts), 0.0);
  int per_replica = (parts + n - 1) / n;  // most parts any replica computes
  // Reducing during backward needs every replica to run backward (all have rows); the
  // collectives then come in the same order on all of them, and the bucket needs no zeroing.
  int64_t bucket_floats = strategy_->bucket_bytes() / static_cast<int64_t>(sizeof(float));
  bool overlap = bucket_floats > 0 && micro == 0 && global >= n;
  strategy_->for_each_replica([&](int r) {
    Replica& rep = *replicas_[static_cast<size_t>(r)];
    float* bucket = rep.bucket.defined() ? rep.bucket.data<float>() : nullptr;
    int64_t total = rep.bucket.defined() ? rep.bucket.numel() / (micro > 0 ? per_replica : 1) : 0;  // floats of one set
    distribute::Communicator& comm = strategy_->communicator(r);
    if (micro > 0) {
      compute_parts(rep, r, batch, step_key, predictions, labels);
      // Every replica gets every micro-batch's gradient and sums them in micro-batch order.
      comm.all_gather(bucket, per_replica * total, rep.gathered.data(), distribute::DataType::Float32);
      bool started = false;
      for (int q = 0; q < n; ++q)
        for (int p = parts * q / n; p < parts * (q + 1) / n; ++p) {
          if (part_begin(global, p, parts) == part_begin(global, p + 1, parts)) continue;
          const float* g = rep.gathered.data() + (static_cast<int64_t>(q) * per_replica + (p - parts * q / n)) * total;
          if (!started) std::memcpy(bucket, g, static_cast<size_t>(total) * sizeof(float));
          else add_in_place(bucket, g, total);
          started = true;
        }
      strategy_->update_rule().apply_reduced(*optimizer_, rep.trainable, rep.reduced);
      return;
    }
    int64_t begin = part_begin(global, r, n), end = part_begin(global, r + 1, n);
    auto pack = [&](size_t i) {  // gradient i into its place in the bucket
      Tensor c = rep.grads[i].contiguous();
      std::memcpy(bucket + rep.offsets[i], c.data<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
    };
    if (begin < end) {  // else a batch with fewer rows than replicas: zero gradients below
      CallContext ctx{true, RandomKey{seed_, step_key, begin}};
      Tensor h, yp;
      batch.slice(begin, end, h, yp);
      GradientTape tape;
      for (auto& layer : rep.layers) h = layer->call(h, ctx);
      Tensor per_sample = loss_->per_sample(yp, h);
      Tensor loss = ops::scale(ops::sum(per_sample), 1.0f / static_cast<float>(global));
      if (overlap) {
        // Each gradient goes into the bucket as soon as backward has finished it, and every
        // bucket_floats completed from the end (the last layers finish first) are all-reduced
        // while backward goes on with the earlier layers.
        rep.done.assign(rep.sources.size(), false);
        size_t frontier = rep.sources.size();  // sources [frontier, n) are in the bucket
        int64_t reduced_from = total;          // bucket [reduced_from, total) is all-reduced
        std::function<void(size_t)> ready = [&](size_t i) {
          pack(i);
          rep.done[i] = true;
          while (frontier > 0 && rep.done[frontier - 1]) --frontier;
          int64_t from = frontier < rep.sources.size() ? rep.offsets[frontier] : total;
          if (reduced_from - from >= bucket_floats || (frontier == 0 && reduced_from > 0)) {
            comm.all_reduce(bucket + from, reduced_from - from, distribute::DataType::Float32,
                            distribute::ReduceOp::Sum);
            reduced_from = from;
          }
        };
        tape.gradient(loss, rep.sources, rep.grads, &ready);
      } else {
        tape.gradient(loss, rep.sources, rep.grads);
      }
      part_losses_[static_cast<size_t>(r)] = ops::sum(per_sample).item();
      predictions[static_cast<size_t>(r)] = h;
      labels[static_cast<size_t>(r)] = yp;
    }
    if (overlap) {
      strategy_->update_rule().apply_reduced(*optimizer_, rep.trainable, rep.reduced);
      return;
    }
    // One collective over the gradients where backward left them.
    rep.buffers.clear();
    for (size_t i = 0; i < rep.grads.size(); ++i) {
      Tensor& g = rep.grads[i];
      if (begin == end) g = Tensor::zeros(rep.sources[i].shape());
      else if (!owns_memory(rep.grads, i)) g = g.clone();
      rep.buffers.emplace_back(g.data<float>(), static_cast<size_t>(g.numel()));
    }
    comm.all_reduce(rep.buffers, distribute::ReduceOp::Sum);
    strategy_->update_rule().apply_reduced(*optimizer_, rep.trainable, rep.grads);
  });
  double loss_sum = 0.0;  // in part order, so the figure does not depend on timing
  for (double l : part_losses_) loss_sum += l;
  return loss_sum;
}

// Replica r computes its micro-batches; with BatchNormalization layer by layer (every layer runs
// on all of them before the next) so that it can gather statistics over the whole global batch,
// all on one tape. Each micro-batch uses its own aliases of the variables (views with their own
// tape identity), so its gradients stay apart and are summed later in micro-batch order.
void Sequential::compute_parts(Replica& rep, int r, const Batch& batch, uint64_t step_key,
                               std::vector<Tensor>& predictions, std::vector<Tensor>& labels) {
  int n = strategy_->num_replicas_in_sync();
  int parts = strategy_->deterministic_micro_batches();
  int per_replica = (parts + n - 1) / n;
  int first = parts * r / n, last = parts * (r + 1) / n;
  int64_t global = batch.rows;
  int64_t total = rep.bucket.numel() / per_replica;
  float* bucket = rep.bucket.data<float>();
  std::vector<int> live;  // this replica's parts with rows
  std::vector<Tensor> h, yp;
  std::vector<CallContext> contexts;
  for (int p = first; p < last; ++p) {
    int64_t begin = part_begin(global, p, parts), end = part_begin(global, p + 1, parts);
    if (begin == end) {  // a batch with fewer rows than parts
      std::fill_n(bucket + (p - first) * total, total, 0.0f);
      continue;
    }
    live.push_back(p);
    batch.slice(begin, end, h.emplace_back(), yp.emplace_back());
    contexts.push_back(CallContext{true, RandomKey{seed_, step_key, begin}});
  }
  // Every part's values for a layer that needs the whole global batch, in part order.
  distribute::Communicator& comm = strategy_->communicator(r);
  std::vector<double> send, received;
  ops::GatherParts gather = [&](std::span<const double> values, size_t per_part) {
    if (!values.empty() && values.size() != live.size() * per_part)
      fail("deterministic step: a layer gathered {} values for {} parts of {}", values.size(), live.size(), per_part);
    send.assign(static_cast<size_t>(per_replica) * per_part, 0.0);
    for (size_t i = 0; i < live.size() && !values.empty(); ++i)
      std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(i * per_part), per_part,
                  send.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(live[i] - first) * per_part));
    received.resize(send.size() * static_cast<size_t>(n));
    comm.all_gather(send.data(), static_cast<int64_t>(send.size()), received.data(), distribute::DataType::Float64);
    std::vector<double> all(static_cast<size_t>(parts) * per_part);
    for (int q = 0; q < n; ++q)
      for (int p = parts * q / n; p < parts * (q + 1) / n; ++p)
        std::copy_n(received.begin() + static_cast<std::ptrdiff_t>(
                                           (static_cast<size_t>(q * per_replica + p - parts * q / n)) * per_part),
                    per_part, all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(p) * per_part));
    return all;
  };
  // A layer that needs the parts together (BatchNormalization) gets them all, on one tape;
  // otherwise each part runs forward and backward on its own, so that only its activations live.
  bool together =
      std::any_of(rep.layers.begin(), rep.layers.end(), [](const auto& l) { return l->needs_parts_together(); });
  size_t k = rep.trainable.size();
  std::vector<Tensor> originals(k), aliases, grads;
  for (size_t j = 0; j < k; ++j) originals[j] = rep.trainable[j]->value;
  struct Restore {  // the variables' own tensors back, whatever happens
    std::vector<Variable*>& vars;
    std::vector<Tensor>& originals;
    ~Restore() {
      for (size_t j = 0; j < vars.size(); ++j) vars[j]->value = originals[j];
    }
  } restore{rep.trainable, originals};
  size_t groups = together ? 1 : live.size();  // together: even with no parts here, for the collectives
  for (size_t g = 0; g < groups; ++g) {
    size_t from = together ? 0 : g, count = together ? live.size() : 1;
    std::vector<Tensor> gh(h.begin() + static_cast<std::ptrdiff_t>(from),
                           h.begin() + static_cast<std::ptrdiff_t>(from + count));
    std::vector<CallContext> gc(contexts.begin() + static_cast<std::ptrdiff_t>(from),
                                contexts.begin() + static_cast<std::ptrdiff_t>(from + count));
    GradientTape tape;
    aliases.resize(count * k);
    grads.resize(count * k);
    for (size_t a = 0; a < aliases.size(); ++a) {
      const Tensor& v = originals[a % k];
      aliases[a] = v.reshape(v.shape());
      tape.watch(aliases[a]);
    }
    layers::BatchParts step{gh, gc,
                            [&](size_t i) {
                              for (size_t j = 0; j < k; ++j) rep.trainable[j]->value = aliases[i * k + j];
                            },
                            gather};
    for (auto& layer : rep.layers) layer->call_parts(step);
    std::vector<Tensor> per_sample(count);
    Tensor loss;
    for (size_t i = 0; i < count; ++i) {
      per_sample[i] = loss_->per_sample(yp[from + i], gh[i]);
      Tensor part = ops::scale(ops::sum(per_sample[i]), 1.0f / static_cast<float>(global));
      loss = i == 0 ? part : ops::add(loss, part);
    }
    if (count > 0) tape.gradient(loss, aliases, grads);
    for (auto it = rep.layers.rbegin(); it != rep.layers.rend(); ++it) (*it)->finish_parts();
    for (size_t i = 0; i < count; ++i) {
      auto p = static_cast<size_t>(live[from + i]);
      float* out = bucket + (live[from + i] - first) * total;
      for (size_t j = 0; j < k; ++j) {
        Tensor c = grads[i * k + j].contiguous();
        std::memcpy(out + rep.offsets[j], c.data<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
      }
      part_losses_[p] = ops::sum(per_sample[i]).item();
      predictions[p] = gh[i];
      labels[p] = yp[from + i];
    }
  }
}

}  // namespace tandem
