// The training step every path runs: split, each replica's forward and backward, the strategy's
// reduction, the strategy's update rule. Each replica runs on its strategy's thread with its own
// tape (kept from step to step, so that in steady state a step asks the system for no memory).
#include "tandem/distribute/train_step.h"

#include <algorithm>
#include <optional>

#include "distribute/replica_state.h"
#include "tandem/ops.h"

namespace tandem::distribute {

void GlobalBatch::slice(int64_t begin, int64_t end, Tensor& xs, Tensor& ys) const {
  if (!x.defined()) {
    gather(begin, end, xs, ys);
  } else if (begin == 0 && end == x.dim(0)) {
    xs = x;
    ys = y;
  } else {
    xs = x.slice(begin, end);
    ys = y.slice(begin, end);
  }
}

ModelReplicas::ModelReplicas(Strategy* strategy, const std::vector<std::shared_ptr<layers::Layer>>& layers)
    : replicas_(static_cast<size_t>(strategy != nullptr ? strategy->num_local_replicas() : 1)) {
  for (int r = 0; r < size(); ++r) {
    Replica& rep = replicas_[static_cast<size_t>(r)];
    for (const auto& l : layers) rep.layers.push_back(r == 0 ? l : strategy->replica_layer(*l, r));
    for (auto& l : rep.layers)
      for (Variable& v : l->variables()) {
        rep.variables.push_back(&v);
        if (v.trainable) rep.trainable.push_back(&v);
      }
  }
}

TrainStep::TrainStep(Strategy* strategy, ModelReplicas& replicas, const Loss& loss, Optimizer& optimizer, uint64_t seed)
    : strategy_(strategy), replicas_(replicas), loss_(loss), optimizer_(optimizer), seed_(seed) {
  reduction_ = strategy != nullptr ? strategy->gradient_reduction() : GradientReduction{GradientReduction::Kind::None};
  const auto& layers = replicas[0].layers;
  together_ = reduction_.kind == GradientReduction::Kind::Ordered &&
              std::any_of(layers.begin(), layers.end(), [](const auto& l) { return l->needs_parts_together(); });
  StopRecording detached;  // a replica's tape records on its thread, only while it steps
  for (int r = 0; r < replicas.size(); ++r) {
    std::vector<Tensor> sources;
    for (Variable* v : replicas[r].trainable) sources.push_back(v->value);
    work_.push_back(std::make_unique<ReplicaState>(reduction_, std::move(sources)));
  }
  replica_job_ = [this](int r) { run_replica(r); };
}

TrainStep::~TrainStep() = default;

bool TrainStep::splits(const Strategy* strategy) {
  return strategy != nullptr && (strategy->num_replicas_in_sync() > 1 ||
                                 strategy->gradient_reduction().kind == GradientReduction::Kind::Ordered);
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

const StepResult& TrainStep::run(const GlobalBatch& batch, uint64_t key) {
  if (strategy_ != nullptr) {
    strategy_->split_batch(batch.rows, split_);
    check_split(batch.rows);
  } else {
    split_.even(batch.rows, 1, 1);
  }
  auto parts = static_cast<size_t>(split_.parts());
  result_.predictions.assign(parts, Tensor());
  result_.labels.assign(parts, Tensor());
  part_losses_.assign(parts, 0.0);
  batch_ = &batch;
  key_ = key;
  if (strategy_ != nullptr) {
    StopRecording not_here;  // each replica records on its own tape
    strategy_->for_each_replica(replica_job_);
    // Other processes computed the other parts: their losses (0 here) summed in, exact, with
    // what the caller sums over the processes (one collective).
    Communicator* workers = strategy_->worker_communicator();
    if (workers != nullptr && workers->size() > 1) {
      exchange_.assign(part_losses_.begin(), part_losses_.end());
      if (add_local_sums) add_local_sums(result_, exchange_);
      Timeline::Span span(strategy_->timeline(), "wait");
      workers->all_reduce(std::span<double>(exchange_), ReduceOp::Sum);
      std::copy_n(exchange_.begin(), parts, part_losses_.begin());
      result_.summed.assign(exchange_.begin() + static_cast<std::ptrdiff_t>(parts), exchange_.end());
    }
  } else {
    run_replica(0);
  }
  double sum = 0.0;  // in part order, so the figure does not depend on timing
  for (double l : part_losses_) sum += l;
  result_.loss = sum / static_cast<double>(batch.rows);
  return result_;
}

int TrainStep::global_replica(int r) const { return strategy_ != nullptr ? strategy_->first_local_replica() + r : r; }

void TrainStep::run_replica(int r) {
  ReplicaState& work = *work_[static_cast<size_t>(r)];
  StopRecording own_tape;  // the replica's tape records only while it steps
  int g = global_replica(r);
  Timeline* timeline = strategy_ != nullptr ? strategy_->timeline() : nullptr;
  if (work.thread_name.empty()) work.thread_name = fmt::format("replica {}", g);
  work.reducer.begin(strategy_ != nullptr ? &strategy_->communicator(r) : nullptr, split_, g, timeline);
  if (together_) {
    compute_parts_together(work, r);
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
  if (strategy_ != nullptr) strategy_->update_rule().apply_reduced(optimizer_, trainable, reduced);
  else optimizer_.apply_here(trainable, reduced);
}

void TrainStep::compute_part(ReplicaState& work, int r, int p) {
  int64_t begin = split_.begin(p), end = split_.end(p), global = batch_->rows;
  Tensor h, y;
  batch_->slice(begin, end, h, y);
  CallContext ctx{true, RandomKey{seed_, key_, begin}};
  Timeline* timeline = strategy_ != nullptr ? strategy_->timeline() : nullptr;
  std::optional<Timeline::Span> forward(std::in_place, timeline, "forward", work.thread_name.c_str());
  work.tape.reset();
  for (auto& layer : replicas_[r].layers) h = layer->call(h, ctx);
  Tensor per_sample = loss_.per_sample(y, h);
  bool whole = end - begin == global;  // one device's step: the batch mean
  Tensor loss = whole ? ops::mean(per_sample) : ops::scale(ops::sum(per_sample), 1.0f / static_cast<float>(global));
  forward.reset();
  {
    Timeline::Span backward(timeline, "backward", work.thread_name.c_str());
    work.tape.gradient(loss, work.sources, work.grads, work.reducer.ready(work.grads));
  }
  part_losses_[static_cast<size_t>(p)] =
      whole ? static_cast<double>(loss.item()) * static_cast<double>(global) : ops::sum(per_sample).item();
  result_.predictions[static_cast<size_t>(p)] = h;
  result_.labels[static_cast<size_t>(p)] = y;
  work.reducer.add(p - split_.first_part[static_cast<size_t>(global_replica(r))], work.grads);
}

}  // namespace tandem::distribute
