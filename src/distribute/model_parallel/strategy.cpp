// ModelParallelStrategy (tandem/distribute/model_parallel.h): the plan that splits a stack's Dense
// layers over the devices, the devices' copies of the optimizer's slots, and the way back to
// whole variables and slots (epoch ends, checkpoints).
#include <cstdio>
#include <map>
#include <mutex>
#include <numeric>

#include "distribute/model_parallel/shards.h"
#include "distribute/replica_threads.h"
#include "tandem/collectives/replica_context.h"

namespace tandem::distribute {

using layers::Layer;
using layers::TensorParallelDense;

namespace {

// n shares of `size` as even as can be: share r is [size·r/n, size·(r+1)/n).
std::vector<int64_t> even_widths(int64_t size, int n) {
  std::vector<int64_t> out;
  for (int r = 0; r < n; ++r) out.push_back(size * (r + 1) / n - size * r / n);
  return out;
}

// Every device updates its own slices with its own slots. Within a copy of the model nothing is
// summed (a device's gradients are its slices' whole gradients, and the whole layers' are the same
// on every piece); over several copies, each device's gradients are summed over its data group
// (the same piece of every copy). The model's optimizer keeps the learning rate and the steps.
class ModelParallelUpdate : public UpdateRule {
 public:
  void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) override {
    apply_reduced(optimizer, variables, gradients);
  }
  void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                     std::span<const Tensor> gradients) override {
    const ReplicaContext& device = *replica_context();
    if (device.num_replicas == 1) return optimizer.apply_here(variables, gradients);  // one device: the model's
    auto& strategy = static_cast<ModelParallelExtended&>(device.strategy->extended());
    Optimizer& mine = strategy.shards().optimizer(optimizer, device.local_replica_id, variables);
    std::vector<Tensor> summed;
    if (device.batch_group != nullptr) {  // the copies' shares of the global mean, summed
      std::vector<std::span<float>> buffers;
      for (const Tensor& g : gradients) {
        summed.push_back(g.contiguous().clone());
        buffers.emplace_back(summed.back().data<float>(), static_cast<size_t>(summed.back().numel()));
      }
      device.batch_group->all_reduce(buffers, ReduceOp::Sum);
      gradients = summed;
    }
    float lr = optimizer.current_learning_rate();
    if (mine.current_learning_rate() != lr) mine.set_learning_rate(lr);  // a callback changed it
    mine.check_clipping_applies(strategy.name(), false, false);
    mine.apply_here(variables, gradients);
    device.communicator->barrier();  // every device has read the model's optimizer
    if (device.local_replica_id == 0) optimizer.set_iterations(mine.iterations());
  }
};

}  // namespace

ModelParallelExtended::ModelParallelExtended(ModelParallelOptions options) : options_(options) {
  int devices = options.processes ? 1 : std::max(1, options.num_shards) * std::max(1, options.data_replicas);
  threads_ = std::make_unique<ReplicaThreads>(
      *this, devices,
      threads_per_device("ModelParallelStrategy", devices, "threads_per_shard", options.threads_per_shard),
      !options.processes, [devices] { return make_in_process_communicators(devices); }, "ModelParallelStrategy");
  run_replicas_on(*threads_);
  if (options.num_shards < 1) fail("ModelParallelStrategy: num_shards must be at least 1, got {}", options.num_shards);
  if (options.data_replicas < 1)
    fail("ModelParallelStrategy: data_replicas must be at least 1, got {}", options.data_replicas);
  int n = num_replicas_in_sync(), t = options.num_shards;
  if (options.processes && options.processes->size() != n)
    fail("{}: {} devices need {} processes, one device each, and {} were launched (tandem launch -np {})", name(), n, n,
         options.processes->size(), n);
  if (options.processes) {  // this process's device alone
    int r = options.processes->rank();
    tensor_.push_back(options.processes->split(r / t, r % t));
    data_.push_back(options.processes->split(r % t, r / t));
  } else {
    tensor_.resize(static_cast<size_t>(n));
    data_.resize(static_cast<size_t>(n));
    threads_->run([&](int r) {  // split is collective: every device at once
      tensor_[static_cast<size_t>(r)] = communicator(r).split(r / t, r % t);
      data_[static_cast<size_t>(r)] = communicator(r).split(r % t, r / t);
    });
  }
  shards_ = std::make_unique<Shards>(num_local_replicas(), options.processes ? tensor_[0].get() : nullptr);
  if (options.device_memory_bytes < 0)
    fail("ModelParallelStrategy: device_memory_bytes must be positive (or 0: no limit), got {}",
         options.device_memory_bytes);
}

ModelParallelExtended::~ModelParallelExtended() = default;

void ModelParallelExtended::split_batch(int64_t rows, BatchSplit& split) const {
  split.even(rows, num_local_replicas(), num_local_replicas());
}

std::pair<int64_t, int64_t> ModelParallelExtended::replica_rows(int64_t rows, int device) const {
  int64_t copy = (first_local_replica() + device) / options_.num_shards, copies = options_.data_replicas;
  return {rows * copy / copies, rows * (copy + 1) / copies};
}

std::string ModelParallelExtended::name() const {
  if (options_.data_replicas > 1)
    return fmt::format("mirrored:{}+model-parallel:{}", options_.data_replicas, options_.num_shards);
  return fmt::format("model-parallel:{}", options_.num_shards);
}

UpdateRule& ModelParallelExtended::update_rule() const {
  static ModelParallelUpdate rule;
  return rule;
}

std::shared_ptr<const layers::Graph> ModelParallelExtended::replica_graph(const std::vector<std::shared_ptr<Layer>>&,
                                                                          std::shared_ptr<const layers::Graph> graph,
                                                                          int) const {
  std::lock_guard lock(plan_mutex_);
  graph_ = graph;
  return graph;
}

std::vector<std::pair<std::string, std::string>> ModelParallelExtended::plan() const {
  std::lock_guard lock(plan_mutex_);
  return plan_;
}

std::vector<std::shared_ptr<Layer>> ModelParallelExtended::replica_layers(
    const std::vector<std::shared_ptr<Layer>>& layers, int replica) const {
  int n = options_.num_shards, piece = (replica + first_local_replica()) % n;
  bool chain = true;
  {
    std::lock_guard lock(plan_mutex_);
    chain = graph_ == nullptr;
  }
  Communicator& group = *tensor_.at(static_cast<size_t>(replica));
  // Which Dense layers split: all the plan can (auto_split), or those made with {.shards = n}.
  auto splits = [&](const Layer& l) {
    auto* dense = dynamic_cast<const layers::Dense*>(&l);
    if (dense == nullptr) return false;
    int asked = dense->options().shards;
    if (asked != 1 && asked != n)
      fail("{}: made with {{.shards = {}}} but ModelParallelStrategy splits over {} devices", dense->label(), asked, n);
    return n > 1 && dense->units() >= n && (options_.auto_split || asked == n);
  };
  auto elementwise = [](const Layer& l) { return l.on_feature_slice(0, 1, 1) != nullptr; };
  // A split that splits nothing would run n copies of the whole model, each on every row.
  const layers::Dense* widest = nullptr;
  bool any = false;
  for (const auto& l : layers)
    if (auto* dense = dynamic_cast<const layers::Dense*>(l.get())) {
      any = any || splits(*dense);
      if (widest == nullptr || dense->units() > widest->units()) widest = dense;
    }
  if (n > 1 && !any && widest != nullptr && widest->units() < n)
    fail(
        "{}: no Dense layer of the model can be split {} ways: the widest, {}, has {} units (one device holds at least "
        "one); split over at most {} devices",
        name(), n, widest->label(), widest->units(), widest->units());
  std::vector<std::shared_ptr<Layer>> out;
  std::vector<std::string> how;  // per layer, as plan() says
  std::vector<int64_t> sliced;   // the activations' widths per device while they are split
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = *layers[i];
    if (!sliced.empty()) {
      if (auto* dense = dynamic_cast<const layers::Dense*>(&l)) {  // the pair's second: by rows
        out.push_back(
            std::make_shared<TensorParallelDense>(*dense, TensorParallelDense::Split::Row, sliced, group, false));
        how.emplace_back("rows");
        sliced.clear();
      } else {
        int64_t first = std::accumulate(sliced.begin(), sliced.begin() + piece, int64_t{0});
        out.push_back(l.on_feature_slice(first, sliced[static_cast<size_t>(piece)],
                                         std::accumulate(sliced.begin(), sliced.end(), int64_t{0})));
        how.emplace_back("feature slice");
      }
      continue;
    }
    if (splits(l)) {
      auto& dense = static_cast<const layers::Dense&>(l);
      size_t j = i + 1;
      while (j < layers.size() && dynamic_cast<const layers::Dense*>(layers[j].get()) == nullptr &&
             elementwise(*layers[j]))
        ++j;
      bool paired = chain && j < layers.size() && dynamic_cast<const layers::Dense*>(layers[j].get()) != nullptr &&
                    splits(*layers[j]) && dense.activation() != tandem::Activation::Softmax;
      std::vector<int64_t> widths = even_widths(dense.units(), n);
      out.push_back(
          std::make_shared<TensorParallelDense>(dense, TensorParallelDense::Split::Column, widths, group, !paired));
      how.emplace_back(paired ? "columns" : "columns, gathered");
      if (paired) sliced = widths;
      continue;
    }
    out.push_back(l.replicate());  // whole on every device
    how.emplace_back("whole");
  }
  shards_->keep(layers, replica, out);
  if (replica == 0) {
    std::vector<std::pair<std::string, std::string>> plan;
    std::string whole;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (layers[i]->variables().empty()) continue;
      plan.emplace_back(layers[i]->label(), how[i]);
      if (how[i] == "whole") whole += (whole.empty() ? "" : ", ") + layers[i]->label();
    }
    std::lock_guard lock(plan_mutex_);
    if (!whole.empty() && plan != plan_)
      std::fprintf(stderr, "%s: left whole on every device (only Dense layers split): %s\n", name().c_str(),
                   whole.c_str());
    plan_ = std::move(plan);
  }
  return out;
}

void ModelParallelExtended::for_each_replica(const std::function<void(int replica)>& fn) {
  if (options_.data_replicas > 1)
    fail(
        "{}: a custom loop's step runs on one copy of the split model (data_replicas 1); with {} copies, each would "
        "compute the whole batch and the sum over them would count it {} times. Train with fit, or use "
        "model-parallel:{} in the loop",
        name(), options_.data_replicas, options_.data_replicas, options_.num_shards);
  if (shards_->whole_holds()) shards_->reslice();
  threads_->run(fn);
  // A custom loop's step: the whole model holds again between steps.
  shards_->write_back(nullptr);
  shards_->hand_to_model();
}

void ModelParallelExtended::set_timeline(Timeline* timeline) {
  StrategyExtended::set_timeline(timeline);
  for (auto* groups : {&tensor_, &data_})
    for (auto& group : *groups)
      if (group) group->set_timeline(timeline);
}

void ModelParallelExtended::collect_state(std::vector<std::pair<std::string, Tensor>>& state) {
  shards_->gather(state);
}

}  // namespace tandem::distribute
