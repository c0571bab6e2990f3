// The training step every path runs: split, each replica's forward and backward, the strategy's
// reduction, the strategy's update rule. Each replica runs on its strategy's thread with its own
// tape (kept from step to step, so that in steady state a step asks the system for no memory).
#include "tandem/distribute/train_step.h"

#include <algorithm>
#include <optional>

#include "distribute/replica_state.h"
#include "distribute/step_body.h"
#include "tandem/devices.h"
#include "tandem/ops.h"

namespace tandem::distribute {

void GlobalBatch::slice(int64_t begin, int64_t end, Tensor& xs, Tensor& ys) const {
  if (!x.defined()) {
    gather(begin, end, &xs, ys);
  } else if (begin == 0 && end == x.dim(0)) {
    xs = x;
    ys = y;
  } else {
    xs = x.slice(begin, end);
    ys = y.slice(begin, end);
  }
}

ModelReplicas::ModelReplicas(const StrategyExtended& strategy,
                             const std::vector<std::shared_ptr<layers::Layer>>& layers,
                             std::shared_ptr<const layers::Graph> graph)
    : replicas_(static_cast<size_t>(strategy.num_local_replicas())) {
  if (graph && !strategy.runs_graphs())
    fail(
        "{}: cuts a model's layers as a chain, and this model is a graph (a functional model); train it under a "
        "data-parallel strategy (mirrored, central storage, multi-worker, parameter servers) or a pipeline",
        strategy.name());
  // Placement (with_device) is one model's; a strategy's replicas are devices of their own (where
  // it places them, the model's own layers are replica 0's, on its first device from the first fit).
  std::vector<Device> devices = strategy.replica_devices();
  for (const auto& l : layers)
    if (l->device() && size() > 1 && (devices.empty() || *l->device() != devices[0]))
      fail(
          "{}: {} is placed on {} (with_device), but {} runs {} replicas, each on devices of its own; place layers "
          "under the default strategy, or let the strategy place them",
          strategy.name(), l->label(), l->device()->name(), strategy.name(), size());
  for (int r = 0; r < size(); ++r) {
    Replica& rep = replicas_[static_cast<size_t>(r)];
    rep.graph = strategy.replica_graph(layers, graph, r);
    rep.layers = strategy.replica_layers(layers, r);
    for (auto& l : rep.layers)
      for (Variable& v : l->variables()) {
        rep.variables.push_back(&v);
        if (v.trainable) rep.trainable.push_back(&v);
      }
  }
}

namespace {

// A model placed on devices with memory limits (with_device; a CPU device's memory_limit_bytes) is
// refused before it trains where its variables and the optimizer's slots do not fit on a device.
void check_placed_memory(ModelReplicas& replicas, const Optimizer& optimizer) {
  if (replicas.size() != 1) return;
  std::vector<std::pair<Device, int64_t>> needs;  // by device, in the layers' order
  for (const auto& l : replicas[0].layers) {
    if (!l->device() || device_memory_limit(*l->device()) == 0) continue;
    auto at = std::find_if(needs.begin(), needs.end(), [&](const auto& n) { return n.first == *l->device(); });
    if (at == needs.end()) at = needs.insert(needs.end(), {*l->device(), 0});
    for (const Variable& v : l->variables())
      at->second += v.value.numel() * static_cast<int64_t>(dtype_size(v.value.dtype())) *
                    (1 + (v.trainable ? optimizer.slots_per_variable() : 0));
  }
  for (auto [device, bytes] : needs) {
    int64_t limit = device_memory_limit(device);
    if (bytes > limit)
      fail(
          "the layers placed on {} need {} there (their variables and {} optimizer slot{} per trainable one, {}), "
          "more than its memory limit of {}; place some of them on another device or raise its limit",
          device.name(), memory_size(bytes), optimizer.slots_per_variable(),
          optimizer.slots_per_variable() == 1 ? "" : "s", optimizer.name(), memory_size(limit));
  }
}

}  // namespace

std::unique_ptr<StepRunner> StrategyExtended::make_step(const StepParts& parts) {
  check_placed_memory(parts.replicas, parts.optimizer);
  return std::make_unique<TrainStep>(*this, parts);
}

TrainStep::TrainStep(StrategyExtended& strategy, const StepParts& parts)
    : strategy_(&strategy),
      replicas_(parts.replicas),
      loss_(parts.loss),
      optimizer_(parts.optimizer),
      seed_(parts.seed),
      metrics_(parts.metrics),
      workers_(strategy.worker_communicator()) {
  if (workers_ != nullptr && workers_->size() == 1) workers_ = nullptr;
  reduction_ = strategy.gradient_reduction();
  const auto& layers = replicas_[0].layers;
  together_ = reduction_.kind == GradientReduction::Kind::Ordered &&
              std::any_of(layers.begin(), layers.end(), [](const auto& l) { return l->needs_parts_together(); });
  StopRecording detached;  // a replica's tape records on its thread, only while it steps
  // Summed in part order, the Dense layers' kernel gradients are summed tile by tile from their
  // products (ops::kernel_products_tile): no part's whole kernel gradient is written and read back.
  bool products = reduction_.kind == GradientReduction::Kind::Ordered && !together_;
  // Parts stacked where every layer computes each row alone, every trainable variable is a Dense
  // kernel (summed from its products) or bias, and the row-exact products are vectorised here
  // (elsewhere the parts run one by one, as fast as before). The same on every replica and worker.
  exact_products_ =
      reduction_.kind == GradientReduction::Kind::Ordered && ops::has_fast_row_exact_products(Device::cpu());
  stacked_ = products && exact_products_ &&
             std::all_of(layers.begin(), layers.end(), [](const auto& l) { return l->stacks_rows(); });
  std::vector<std::vector<Tensor>> sources(static_cast<size_t>(replicas_.size()));
  std::vector<std::vector<bool>> as_products(sources.size());
  std::vector<std::vector<int>> bias_of(sources.size());
  for (int r = 0; r < replicas_.size(); ++r) {
    auto q = static_cast<size_t>(r);
    for (const auto& l : replicas_[r].layers) {
      layers::Layer::DeferrableKernel deferrable = l->deferrable_kernel();
      int kernel = -1;  // the layer's kernel among the sources, where its gradient comes as products
      for (size_t k = 0; k < l->variables().size(); ++k) {
        const Variable& v = l->variables()[k];
        if (!v.trainable) continue;
        as_products[q].push_back(products && static_cast<int>(k) == deferrable.kernel &&
                                 ops::DeferredKernelGradients::takes(v.value.device()));
        if (as_products[q].back()) kernel = static_cast<int>(sources[q].size());
        bias_of[q].push_back(static_cast<int>(k) == deferrable.bias ? kernel : -1);
        sources[q].push_back(v.value);
        if (!as_products[q].back() && bias_of[q].back() < 0) stacked_ = false;
      }
    }
    if (sources[q].size() != replicas_[r].trainable.size())
      fail("{}: replica {} has {} trainable variables in its layers but {} in its list", strategy.name(), r,
           sources[q].size(), replicas_[r].trainable.size());
  }
  for (size_t q = 0; q < sources.size(); ++q)
    work_.push_back(std::make_unique<ReplicaState>(reduction_, std::move(sources[q]), std::move(as_products[q]),
                                                   stacked_ ? std::move(bias_of[q]) : std::vector<int>{}));
  replica_job_ = [this](int r) { run_replica(r); };
}

TrainStep::~TrainStep() = default;

bool TrainStep::lazy_batches() const {
  return strategy_->num_replicas_in_sync() > 1 || reduction_.kind == GradientReduction::Kind::Ordered;
}

void check_same_batch(const std::string& strategy, Communicator& workers, bool have, int64_t rows, int epoch,
                      int64_t step, std::vector<int64_t>& all) {
  int64_t mine[2] = {have ? 1 : 0, have ? rows : 0};
  all.resize(2 * static_cast<size_t>(workers.size()));
  workers.all_gather(mine, 2, all.data(), DataType::Int64);
  auto describe = [&](size_t w) {
    return all[2 * w] == 0 ? std::string("has no batch left") : fmt::format("has one of {} rows", all[2 * w + 1]);
  };
  for (size_t w = 1; w < all.size() / 2; ++w)
    if (all[2 * w] != all[0] || all[2 * w + 1] != all[1])
      fail(
          "{}: at batch {} of epoch {} worker 0 {} and worker {} {}: every worker must read the same data (each takes "
          "its rows of every global batch)",
          strategy, step + 1, epoch + 1, describe(0), w, describe(w));
}

void TrainStep::check_batch(bool have, int64_t rows, int epoch, int64_t step) {
  if (workers_ != nullptr) check_same_batch(strategy_->name(), *workers_, have, rows, epoch, step, batch_sizes_);
}

// A strategy's split must cover the batch in order and give every replica a range of parts.
void TrainStep::check_split(int64_t rows) const {
  const BatchSplit& s = split_;
  int replicas = strategy_->num_replicas_in_sync();  // over every process
  bool ok = s.row.size() >= 2 && s.row.front() == 0 && s.row.back() == rows &&
            static_cast<int>(s.first_part.size()) == replicas + 1 && s.first_part.front() == 0 &&
            s.first_part.back() == s.parts();
  for (size_t i = 1; ok && i < s.row.size(); ++i) ok = s.row[i - 1] <= s.row[i];
  for (size_t i = 1; ok && i < s.first_part.size(); ++i) ok = s.first_part[i - 1] <= s.first_part[i];
  if (!ok)
    fail("{}: split_batch cut a batch of {} rows into {} parts for {} replicas that do not cover it in order",
         strategy_->name(), rows, s.parts(), replicas);
}

std::optional<double> TrainStep::run(const GlobalBatch& batch, uint64_t key) {
  strategy_->split_batch(batch.rows, split_);
  check_split(batch.rows);
  auto parts = static_cast<size_t>(split_.parts());
  result_.predictions.assign(parts, Tensor());
  result_.labels.assign(parts, Tensor());
  part_losses_.assign(parts, 0.0);
  part_loss_values_.assign(parts, Tensor());
  part_loss_scales_.assign(parts, 1.0);
  batch_ = &batch;
  key_ = key;
  Tensor penalty;  // of the weights the step starts from (read after the update is queued)
  {
    StopRecording not_here;  // each replica records on its own tape
    penalty = ops::penalties(replicas_[0].trainable);
    strategy_->for_each_replica(replica_job_);
  }
  for (size_t p = 0; p < parts; ++p)
    if (part_loss_values_[p].defined())
      part_losses_[p] = static_cast<double>(part_loss_values_[p].item()) * part_loss_scales_[p];
  update_metrics();
  double sum = 0.0;  // in part order, so the figure does not depend on timing
  for (double l : part_losses_) sum += l;
  return sum / static_cast<double>(batch.rows) + (penalty.defined() ? static_cast<double>(penalty.item()) : 0.0);
}

// Alone, the metrics take the parts' predictions. Over several processes, each has its own parts'
// only: what they add to each metric (sums and counts, exact) is summed over the processes with
// the parts' losses (0 here for the others' parts), in one collective.
void TrainStep::update_metrics() {
  auto add_parts = [&] {
    for (size_t p = 0; p < result_.predictions.size(); ++p)
      if (result_.labels[p].defined())
        for (Metric& m : metrics_) m.update(result_.labels[p], result_.predictions[p]);
  };
  if (workers_ == nullptr) return add_parts();
  size_t parts = part_losses_.size(), n = metrics_.size();
  metric_sums_.resize(2 * n);
  for (size_t i = 0; i < n; ++i) {
    auto [total, count] = metrics_[i].accumulators();
    metric_sums_[2 * i] = total;
    metric_sums_[2 * i + 1] = static_cast<double>(count);
  }
  add_parts();
  exchange_.assign(part_losses_.begin(), part_losses_.end());
  for (size_t i = 0; i < n; ++i) {
    auto [total, count] = metrics_[i].accumulators();
    exchange_.push_back(total - metric_sums_[2 * i]);
    exchange_.push_back(static_cast<double>(count) - metric_sums_[2 * i + 1]);
  }
  {
    Timeline::Span span(strategy_->timeline(), "wait");
    workers_->all_reduce(std::span<double>(exchange_), ReduceOp::Sum);
  }
  std::copy_n(exchange_.begin(), parts, part_losses_.begin());
  for (size_t i = 0; i < n; ++i)
    metrics_[i].restore({metric_sums_[2 * i] + exchange_[parts + 2 * i],
                         static_cast<int64_t>(metric_sums_[2 * i + 1] + exchange_[parts + 2 * i + 1])});
}

int TrainStep::global_replica(int r) const { return strategy_->first_local_replica() + r; }

void TrainStep::run_replica(int r) {
  ReplicaState& work = *work_[static_cast<size_t>(r)];
  StopRecording own_tape;  // the replica's tape records only while it steps
  int g = global_replica(r);
  Timeline* timeline = strategy_->timeline();
  if (work.thread_name.empty()) work.thread_name = fmt::format("replica {}", g);
  work.reducer.begin(&strategy_->communicator(r), split_, g, timeline);
  if (together_) {
    compute_parts_together(work, r);
  } else if (stacked_) {
    compute_parts_stacked(work, r);
  } else {
    // A part with no rows (a batch shorter than the replicas) still runs, on 0 rows: its
    // gradients are zeros, and layers that talk across replicas (batch normalization) find
    // every replica in their collectives.
    for (int p = split_.first_part[static_cast<size_t>(g)]; p < split_.first_part[static_cast<size_t>(g) + 1]; ++p)
      compute_part(work, r, p);
  }
  std::span<const Tensor> reduced = work.reducer.finish();
  Timeline::Span update(timeline, "update", work.thread_name.c_str());
  std::vector<Variable*>& trainable = replicas_[r].trainable;
  // The optimizer's own route (hvd::DistributedOptimizer's, a step of one replica per process)
  // takes the gradients as Optimizer::apply gives them; else the strategy's rule.
  if (UpdateRoute* own = optimizer_.route()) own->apply(optimizer_, trainable, reduced);
  else strategy_->update_rule().apply_reduced(optimizer_, trainable, reduced);
}

void TrainStep::compute_part(ReplicaState& work, int r, int p) {
  int64_t begin = split_.begin(p), end = split_.end(p), global = batch_->rows;
  Tensor x, y;
  batch_->slice(begin, end, x, y);
  Timeline* timeline = strategy_->timeline();
  std::optional<ops::RowExactProducts> exact;
  if (exact_products_) exact.emplace();
  std::optional<ops::DeferredKernelGradients> deferred;
  if (work.defers()) {
    deferred.emplace();
    for (size_t i = 0; i < work.sources.size(); ++i)
      if (work.as_products[i]) deferred->defer(work.sources[i]);
  }
  // Deferred kernels' gradients are not the tape's: it makes the others' (tape_sources). The last
  // step's gradients go before backward makes new ones (train_rows clears those it writes).
  if (deferred)
    for (Tensor& g : work.grads) g = Tensor();
  Backward to = deferred ? Backward{work.tape_sources, work.tape_grads}
                         : Backward{work.sources, work.grads, work.reducer.ready(work.grads)};
  RowsForward step =
      train_rows(work.tape, replicas_[r].network(), loss_, x, y,
                 {seed_, key_, begin, global, deferred ? &*deferred : nullptr, nullptr, batch_->weights_of(begin, end)},
                 to, {timeline, work.thread_name.c_str()});
  const Tensor& loss = step.loss.loss;
  if (deferred) {
    for (size_t j = 0; j < work.tape_of.size(); ++j) work.grads[work.tape_of[j]] = std::move(work.tape_grads[j]);
    for (size_t i = 0; i < work.sources.size(); ++i)
      if (work.as_products[i]) work.products[i] = deferred->take(work.sources[i]);
  }
  // One device's figure is its batch mean's; a part's, its sum (read in run, after the update is queued).
  part_loss_values_[static_cast<size_t>(p)] = step.loss.whole ? loss : ops::sum(step.loss.per_sample);
  part_loss_scales_[static_cast<size_t>(p)] = step.loss.whole ? static_cast<double>(global) : 1.0;
  result_.predictions[static_cast<size_t>(p)] = step.predictions;
  result_.labels[static_cast<size_t>(p)] = y;
  work.reducer.add(p - split_.first_part[static_cast<size_t>(global_replica(r))], work.grads, work.products);
}

}  // namespace tandem::distribute
