// PipelineStrategy (tandem/distribute/pipeline.h): the stages' groups, the cut of the model into
// stages (given, or balanced on each layer's measured cost), each device's stack.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "distribute/replica_threads.h"
#include "distribute/step_body.h"
#include "tandem/autograd.h"
#include "tandem/distribute/pipeline.h"
#include "tandem/graph.h"
#include "tandem/ops.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

using layers::Layer;

namespace {

// Each layer's time in a step as the stages run it (seconds, the best of a few): `micro`
// micro-batches of `rows` rows forward and backward, then, where Dense kernels' gradients are
// deferred, the kernel's gradient over all their rows at once. Measured on copies (the model's own
// layers, their moving statistics included, stay as they are).
std::vector<double> layer_costs(const std::vector<std::shared_ptr<Layer>>& layers, int64_t rows, int threads, int micro,
                                bool defer) {
  int threads_before = num_threads_setting();
  set_num_threads(threads);
  Shape shape{rows};
  for (int64_t d : layers.front()->input_shape()) shape.push_back(d);
  std::vector<float> values(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(std::sin(static_cast<double>(i) * 0.7));
  Tensor h = Tensor::from_vector(shape, values);
  std::vector<double> costs;
  for (size_t i = 0; i < layers.size(); ++i) {
    std::shared_ptr<Layer> copy = layers[i]->replicate();
    int kernel = defer ? copy->deferrable_kernel().kernel : -1;
    bool deferred = kernel >= 0 && copy->variables()[static_cast<size_t>(kernel)].trainable;
    std::vector<Tensor> sources;
    for (size_t k = 0; k < copy->variables().size(); ++k)
      if (copy->variables()[k].trainable && !(deferred && static_cast<int>(k) == kernel))
        sources.push_back(copy->variables()[k].value);
    if (i > 0) sources.push_back(h);  // every layer but the model's first hands its input's gradient back
    std::vector<Tensor> grads(sources.size());
    double best = std::numeric_limits<double>::infinity();
    Tensor out;
    for (int round = 0; round < 3; ++round) {
      auto begin = std::chrono::steady_clock::now();
      ops::DeferredKernelGradients kernels;
      if (deferred) kernels.defer(copy->variables()[0].value);
      for (int m = 0; m < micro; ++m) {
        GradientTape tape;
        if (i > 0) tape.watch(h);
        out = copy->call(h, CallContext{true, RandomKey{1, static_cast<uint64_t>(round), 0}, &kernels});
        backward(tape, out, {sources, grads, nullptr, Tensor::full(out.shape(), 1.0f)});
      }
      if (deferred) kernels.gradient(copy->variables()[0].value);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    }
    costs.push_back(best);
    h = out;
  }
  set_num_threads(threads_before);
  return costs;
}

// A graph's layers' times, as layer_costs but each call (node) on inputs of its shapes (a layer
// called twice counts both calls), without deferred kernel gradients.
std::vector<double> graph_layer_costs(const std::vector<std::shared_ptr<Layer>>& layers, const layers::Graph& graph,
                                      int64_t rows, int threads, int micro) {
  int threads_before = num_threads_setting();
  set_num_threads(threads);
  std::vector<std::shared_ptr<Layer>> copies;
  for (const auto& l : layers) copies.push_back(l->replicate());
  std::vector<double> costs(layers.size(), 0.0);
  for (const layers::Graph::Node& node : graph.nodes) {
    Layer& layer = *copies[node.layer];
    std::vector<Tensor> inputs, sources;
    for (int from : node.inputs) {
      Shape shape{rows};
      for (int64_t d : from >= 0 ? layers[graph.nodes[static_cast<size_t>(from)].layer]->output_shape()
                                 : graph.input_shapes[static_cast<size_t>(-1 - from)])
        shape.push_back(d);
      std::vector<float> values(static_cast<size_t>(shape.numel()));
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(std::sin(static_cast<double>(i) * 0.7));
      inputs.push_back(Tensor::from_vector(shape, values));
      sources.push_back(inputs.back());
    }
    for (Variable& v : layer.variables())
      if (v.trainable) sources.push_back(v.value);
    std::vector<Tensor> grads(sources.size());
    double best = std::numeric_limits<double>::infinity();
    for (int round = 0; round < 3; ++round) {
      auto begin = std::chrono::steady_clock::now();
      for (int m = 0; m < micro; ++m) {
        GradientTape tape;
        for (const Tensor& x : inputs) tape.watch(x);
        CallContext ctx{true, RandomKey{1, static_cast<uint64_t>(round), 0}};
        auto* merge = dynamic_cast<layers::Merge*>(&layer);
        Tensor out = merge != nullptr ? merge->call_inputs(inputs, ctx) : layer.call(inputs[0], ctx);
        backward(tape, out, {sources, grads, nullptr, Tensor::full(out.shape(), 1.0f)});
      }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    }
    costs[node.layer] += best;
  }
  set_num_threads(threads_before);
  return costs;
}

// The cut of costs into `stages` contiguous non-empty runs whose largest sum is least, each run
// starting where `allowed` says a cut may go (empty: anywhere): the first index of each run after
// the first; empty where no such cut exists.
std::vector<int> balanced_cuts(const std::vector<double>& costs, int stages, const std::vector<bool>& allowed = {}) {
  auto n = static_cast<int>(costs.size());
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)];
  auto sum = [&](int a, int b) { return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)]; };
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the least largest sum of layers [0, i) in s runs; from[s][i]: where the last run starts.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages) + 1,
                                        std::vector<double>(static_cast<size_t>(n) + 1, inf));
  std::vector<std::vector<int>> from(best.size(), std::vector<int>(static_cast<size_t>(n) + 1, 0));
  best[0][0] = 0.0;
  for (int s = 1; s <= stages; ++s)
    for (int i = s; i <= n; ++i)
      for (int j = s - 1; j < i; ++j) {
        if (j > 0 && !allowed.empty() && !allowed[static_cast<size_t>(j)]) continue;
        double v = std::max(best[static_cast<size_t>(s) - 1][static_cast<size_t>(j)], sum(j, i));
        if (v < best[static_cast<size_t>(s)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(s)][static_cast<size_t>(i)] = v;
          from[static_cast<size_t>(s)][static_cast<size_t>(i)] = j;
        }
      }
  if (best[static_cast<size_t>(stages)][static_cast<size_t>(n)] == inf) return {};
  std::vector<int> cuts(static_cast<size_t>(stages) - 1);
  for (int s = stages, i = n; s > 1; --s) {
    i = from[static_cast<size_t>(s)][static_cast<size_t>(i)];
    cuts[static_cast<size_t>(s) - 2] = i;
  }
  return cuts;
}

}  // namespace

PipelineExtended::PipelineExtended(PipelineOptions options) : options_(std::move(options)) {
  const PipelineOptions& o = options_;
  int devices = o.processes ? 1 : std::max(1, o.num_stages) * std::max(1, o.data_replicas);
  threads_ = std::make_unique<ReplicaThreads>(
      *this, devices,
      threads_per_device("PipelineStrategy", devices, "threads_per_stage", std::max(1, o.threads_per_stage)),
      !o.processes, [devices] { return make_in_process_communicators(devices); }, "PipelineStrategy");
  run_replicas_on(*threads_);
  if (o.processes && o.processes->size() != std::max(1, o.num_stages) * std::max(1, o.data_replicas))
    fail(
        "PipelineStrategy: {} stage{} × {} cop{} of the pipeline need {} processes, one device each, and {} were "
        "launched (tandem launch -np {})",
        o.num_stages, o.num_stages == 1 ? "" : "s", o.data_replicas, o.data_replicas == 1 ? "y" : "ies",
        o.num_stages * o.data_replicas, o.processes->size(), o.num_stages * o.data_replicas);
  if (o.num_stages < 1) fail("PipelineStrategy: num_stages must be at least 1, got {}", o.num_stages);
  if (o.micro_batches < 1) fail("PipelineStrategy: micro_batches must be at least 1, got {}", o.micro_batches);
  if (o.data_replicas < 1) fail("PipelineStrategy: data_replicas must be at least 1, got {}", o.data_replicas);
  if (o.probe_rows < 1) fail("PipelineStrategy: probe_rows must be at least 1, got {}", o.probe_rows);
  if (!o.cuts.empty()) {
    if (static_cast<int>(o.cuts.size()) != o.num_stages - 1)
      fail("PipelineStrategy: {} stages take {} cuts (the first layer of each stage after the first), got {}",
           o.num_stages, o.num_stages - 1, o.cuts.size());
    for (size_t i = 0; i < o.cuts.size(); ++i)
      if (o.cuts[i] < 1 || (i > 0 && o.cuts[i] <= o.cuts[i - 1]))
        fail("PipelineStrategy: the cuts must rise from 1 (every stage holds a layer), got {} at place {}", o.cuts[i],
             i);
    cuts_ = o.cuts;
  }
  make_groups();
}

void PipelineExtended::make_groups() {
  int n = num_replicas_in_sync(), s = options_.num_stages;
  if (options_.processes) {  // this process's device alone
    int r = options_.processes->rank();
    pipe_.clear();
    data_.clear();
    pipe_.push_back(options_.processes->split(r / s, r % s));
    data_.push_back(options_.processes->split(r % s, r / s));
    if (Timeline* t = timeline()) set_timeline(t);
    return;
  }
  pipe_.resize(static_cast<size_t>(n));
  data_.resize(static_cast<size_t>(n));
  threads_->run([&](int r) {  // split is collective: every device at once
    pipe_[static_cast<size_t>(r)] = communicator(r).split(r / s, r % s);
    data_[static_cast<size_t>(r)] = communicator(r).split(r % s, r / s);
  });
  if (Timeline* t = timeline()) set_timeline(t);
}

PipelineExtended::~PipelineExtended() = default;

void PipelineExtended::split_batch(int64_t rows, BatchSplit& split) const {
  split.even(rows, num_local_replicas(), num_local_replicas());
}

std::string PipelineExtended::name() const {
  std::string pipe = fmt::format("pipeline:{}:{}", options_.num_stages, options_.micro_batches);
  if (options_.data_replicas > 1) return fmt::format("mirrored:{}+{}", options_.data_replicas, pipe);
  return pipe;
}

std::vector<int> PipelineExtended::cuts() const {
  std::lock_guard lock(mutex_);
  return cuts_;
}

std::vector<double> PipelineExtended::stage_costs() const {
  std::lock_guard lock(mutex_);
  return costs_;
}

// Where a graph may be cut (before which layers: between blocks), and the block a cut before
// layer c falls in (the layers between the places around it), for the errors.
namespace {
std::vector<bool> graph_cuts(const std::vector<std::shared_ptr<Layer>>& layers, const layers::Graph& graph) {
  std::vector<std::optional<int>> crossing = layers::crossing_tensors(graph, layers.size());
  std::vector<bool> allowed(layers.size(), false);
  for (size_t c = 1; c < layers.size(); ++c) allowed[c] = crossing[c].has_value();
  return allowed;
}

std::string block_around(const std::vector<std::shared_ptr<Layer>>& layers, const std::vector<bool>& allowed,
                         size_t c) {
  size_t from = c, to = c;
  while (from > 0 && !allowed[from]) --from;
  while (to < layers.size() && !allowed[to]) ++to;
  return fmt::format("{} to {}", layers[from]->label(), layers[to - 1]->label());
}

std::string places(const std::vector<std::shared_ptr<Layer>>& layers, const std::vector<bool>& allowed) {
  std::string out;
  for (size_t c = 1; c < layers.size(); ++c)
    if (allowed[c]) out += (out.empty() ? "before " : ", ") + layers[c]->label();
  return out.empty() ? "none" : out;
}
}  // namespace

const std::vector<int>& PipelineExtended::cuts_for(const std::vector<std::shared_ptr<Layer>>& layers) const {
  int stages = options_.num_stages;
  if (static_cast<int>(layers.size()) < stages)
    fail("{}: the model has {} layer{}, too few for {} stages (each stage holds one or more)", name(), layers.size(),
         layers.size() == 1 ? "" : "s", stages);
  std::vector<bool> allowed = graph_ ? graph_cuts(layers, *graph_) : std::vector<bool>{};
  if (!options_.cuts.empty()) {
    if (options_.cuts.back() >= static_cast<int>(layers.size()))
      fail("{}: the last stage would start at layer {}, but the model has {} layers", name(), options_.cuts.back(),
           layers.size());
    for (int c : options_.cuts)
      if (graph_ && !allowed[static_cast<size_t>(c)])
        fail(
            "{}: the cut before layer {} ({}) falls inside a block of the graph (the layers from {}), which more "
            "than one tensor leaves: a stage's layers pass one tensor to the next; cut where one does ({})",
            name(), c, layers[static_cast<size_t>(c)]->label(), block_around(layers, allowed, static_cast<size_t>(c)),
            places(layers, allowed));
    return cuts_;
  }
  if (cut_for_ != layers.front().get() || static_cast<int>(cuts_.size()) != stages - 1) {
    for (const auto& l : layers)
      if (!l->built()) fail("{}: {} is not built: give the model its input shape before it trains", name(), l->label());
    std::vector<double> costs = graph_ ? graph_layer_costs(layers, *graph_, options_.probe_rows,
                                                           options_.threads_per_stage, options_.micro_batches)
                                       : layer_costs(layers, options_.probe_rows, options_.threads_per_stage,
                                                     options_.micro_batches, options_.defer_kernel_gradients);
    if (options_.processes)  // every process cuts where rank 0 measured
      options_.processes->broadcast(costs.data(), static_cast<int64_t>(costs.size()), DataType::Float64, 0);
    cuts_ = stages > 1 ? balanced_cuts(costs, stages, allowed) : std::vector<int>{};
    if (stages > 1 && cuts_.empty())
      fail(
          "{}: the graph can be cut only where one tensor passes from a stage to the next, between its blocks "
          "({}): fewer places than the {} cuts {} stages need",
          name(), places(layers, allowed), stages - 1, stages);
    double total = 0.0;
    for (double c : costs) total += c;
    costs_.assign(static_cast<size_t>(stages), 0.0);
    for (size_t i = 0, s = 0; i < costs.size(); ++i) {
      while (s < cuts_.size() && static_cast<int>(i) >= cuts_[s]) ++s;
      costs_[s] += total > 0.0 ? costs[i] / total : 0.0;
    }
    cut_for_ = layers.front().get();
  }
  return cuts_;
}

std::shared_ptr<const layers::Graph> PipelineExtended::replica_graph(const std::vector<std::shared_ptr<Layer>>& layers,
                                                                     std::shared_ptr<const layers::Graph> graph,
                                                                     int replica) const {
  std::lock_guard lock(mutex_);
  if (graph_ != graph) cut_for_ = nullptr;  // another model: its own cuts
  graph_ = graph;
  if (!graph) return nullptr;
  const std::vector<int>& cuts = cuts_for(layers);
  int stage = (replica + first_local_replica()) % options_.num_stages;
  size_t begin = stage == 0 ? 0 : static_cast<size_t>(cuts[static_cast<size_t>(stage) - 1]);
  size_t end = stage + 1 == options_.num_stages ? layers.size() : static_cast<size_t>(cuts[static_cast<size_t>(stage)]);
  return std::make_shared<layers::Graph>(layers::graph_part(*graph, layers, begin, end));
}

std::vector<std::shared_ptr<Layer>> PipelineExtended::replica_layers(const std::vector<std::shared_ptr<Layer>>& layers,
                                                                     int replica) const {
  std::lock_guard lock(mutex_);
  const std::vector<int>& cuts = cuts_for(layers);
  whole_ = layers;
  int device = replica + first_local_replica();
  int stage = device % options_.num_stages, copy = options_.processes ? 0 : device / options_.num_stages;
  size_t begin = stage == 0 ? 0 : static_cast<size_t>(cuts[static_cast<size_t>(stage) - 1]);
  size_t end = stage + 1 == options_.num_stages ? layers.size() : static_cast<size_t>(cuts[static_cast<size_t>(stage)]);
  std::vector<std::shared_ptr<Layer>> out;
  for (size_t i = begin; i < end; ++i) out.push_back(copy == 0 ? layers[i] : layers[i]->replicate());
  return out;
}

int PipelineExtended::stage_of(size_t layer) const {
  int stage = 0;
  while (stage < static_cast<int>(cuts_.size()) && static_cast<int>(layer) >= cuts_[static_cast<size_t>(stage)])
    ++stage;
  return stage;
}

void PipelineExtended::share_stages() {
  if (!options_.processes) return;
  Communicator& pipe = pipe_group(0);
  for (size_t i = 0; i < whole_.size(); ++i)
    for (Variable& v : whole_[i]->variables())
      pipe.broadcast(v.value.data<float>(), v.value.numel(), DataType::Float32, stage_of(i));
}

void PipelineExtended::collect_state(std::vector<std::pair<std::string, Tensor>>& state) {
  if (!options_.processes || whole_.empty()) return;
  share_stages();  // the variables' entries are the model's own tensors: whole now
  if (optimizer_ == nullptr) return;
  // Each stage's slots from its process: a stage's entries as an optimizer of its variables
  // writes them (made here where another process trains them), filled by the one that does.
  Communicator& pipe = pipe_group(0);
  int mine = first_local_replica() % options_.num_stages;
  std::vector<std::pair<std::string, Tensor>> slots;
  for (int stage = 0; stage < options_.num_stages; ++stage) {
    std::vector<Variable*> trainable;
    for (size_t i = 0; i < whole_.size(); ++i)
      if (stage_of(i) == stage)
        for (Variable& v : whole_[i]->variables())
          if (v.trainable) trainable.push_back(&v);
    std::unique_ptr<Optimizer> holder = optimizer_->replicate({});
    Optimizer& of = stage == mine ? *optimizer_ : *holder;
    if (stage != mine) holder->build(trainable);
    for (auto& [name, tensor] : of.state()) {
      if (name == "optimizer/iterations") continue;
      Tensor t = stage == mine ? tensor.clone() : tensor;
      pipe.broadcast(t.data<float>(), t.numel(), DataType::Float32, stage);
      slots.emplace_back(name, t);
    }
  }
  std::erase_if(state,
                [](const auto& e) { return e.first.starts_with("optimizer/") && e.first != "optimizer/iterations"; });
  for (auto& entry : slots) state.push_back(std::move(entry));
}

void PipelineExtended::for_each_replica(const std::function<void(int)>&) {
  fail(
      "{}: a custom loop's step (Strategy::run) runs the whole model on every replica, but each of this strategy's "
      "devices holds one stage of it; train with fit, or use model-parallel:N for a custom loop",
      name());
}

void PipelineExtended::set_timeline(Timeline* timeline) {
  StrategyExtended::set_timeline(timeline);
  for (auto* groups : {&pipe_, &data_})
    for (auto& group : *groups)
      if (group) group->set_timeline(timeline);
}

}  // namespace tandem::distribute
