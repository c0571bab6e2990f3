// Graphs of layers (graph.h): the merge layers, symbolic tensors and tracing, running a network.
#include "tandem/graph.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace tandem::layers {

// --- merge layers ---

Shape Merge::build_inputs(std::span<const Shape> shapes, uint64_t seed) {
  if (built_) {
    if (!std::equal(shapes.begin(), shapes.end(), input_shapes_.begin(), input_shapes_.end()))
      fail("{}: already built for {} inputs of shapes starting {}, called on {} inputs of shapes starting {}", label(),
           input_shapes_.size(), input_shapes_.empty() ? "()" : input_shapes_[0].str_with_batch(), shapes.size(),
           shapes.empty() ? "()" : shapes[0].str_with_batch());
    return output_shape_;
  }
  if (shapes.size() < min_inputs_ || shapes.size() > max_inputs_)
    fail("{}: takes {} inputs, got {}", label(),
         min_inputs_ == max_inputs_ ? std::to_string(min_inputs_) : fmt::format("at least {}", min_inputs_),
         shapes.size());
  Shape out = merged_shape(shapes);
  input_shapes_.assign(shapes.begin(), shapes.end());
  (void)seed;  // no variables
  input_shape_ = shapes[0];
  output_shape_ = out;
  built_ = true;
  return out;
}

Shape Merge::do_build(const Shape& input_shape, uint64_t seed) {
  (void)seed;
  fail("{}: takes a list of {} or more inputs, got one of shape {}", label(), min_inputs_,
       input_shape.str_with_batch());
}

Tensor Merge::call(const Tensor& x, const CallContext& ctx) {
  (void)ctx;
  fail("{}: takes a list of {} or more inputs, got one tensor of shape {}", label(), min_inputs_,
       x.defined() ? x.shape().str() : "(undefined)");
}

void Merge::check_inputs(std::span<const Tensor> xs) const {
  if (!built_) fail("{}: called before it was built", label());
  if (xs.size() != input_shapes_.size())
    fail("{}: built for {} inputs, called on {}", label(), input_shapes_.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& want = input_shapes_[i];
    bool ok = xs[i].defined() && xs[i].rank() == want.rank() + 1;
    for (int d = 0; ok && d < want.rank(); ++d) ok = xs[i].dim(d + 1) == want[d];
    if (!ok)
      fail("{}: input {} should be of shape {}, got {}", label(), i, want.str_with_batch(),
           xs[i].defined() ? xs[i].shape().str() : "(undefined)");
    if (i > 0 && xs[i].dim(0) != xs[0].dim(0))
      fail("{}: input {} has {} rows, input 0 has {}", label(), i, xs[i].dim(0), xs[0].dim(0));
  }
}

namespace {
Shape same_shapes(const Layer& layer, std::span<const Shape> shapes) {
  for (size_t i = 1; i < shapes.size(); ++i)
    if (!(shapes[i] == shapes[0]))
      fail("{}: its inputs must have one shape; input 0 is {}, input {} is {}", layer.label(),
           shapes[0].str_with_batch(), i, shapes[i].str_with_batch());
  return shapes[0];
}
}  // namespace

Shape Add::merged_shape(std::span<const Shape> shapes) const { return same_shapes(*this, shapes); }
Shape Subtract::merged_shape(std::span<const Shape> shapes) const { return same_shapes(*this, shapes); }
Shape Multiply::merged_shape(std::span<const Shape> shapes) const { return same_shapes(*this, shapes); }

Tensor Add::call_inputs(std::span<const Tensor> xs, const CallContext& ctx) {
  (void)ctx;
  check_inputs(xs);
  Tensor y = ops::add(xs[0], xs[1]);
  for (size_t i = 2; i < xs.size(); ++i) y = ops::add(y, xs[i]);
  return y;
}

Tensor Subtract::call_inputs(std::span<const Tensor> xs, const CallContext& ctx) {
  (void)ctx;
  check_inputs(xs);
  return ops::sub(xs[0], xs[1]);
}

Tensor Multiply::call_inputs(std::span<const Tensor> xs, const CallContext& ctx) {
  (void)ctx;
  check_inputs(xs);
  Tensor y = ops::mul(xs[0], xs[1]);
  for (size_t i = 2; i < xs.size(); ++i) y = ops::mul(y, xs[i]);
  return y;
}

Shape Concatenate::merged_shape(std::span<const Shape> shapes) const {
  int rank = shapes[0].rank() + 1;  // with the batch axis, as Keras counts
  if (axis_ < -rank || axis_ >= rank || axis_ == 0 || axis_ == -rank)
    fail("{}: axis {} is not a per-sample axis of inputs of shape {}", label(), axis_, shapes[0].str_with_batch());
  int a = (axis_ < 0 ? axis_ + rank : axis_) - 1;  // per sample
  Shape out = shapes[0];
  for (size_t i = 1; i < shapes.size(); ++i) {
    bool ok = shapes[i].rank() == shapes[0].rank();
    for (int d = 0; ok && d < shapes[0].rank(); ++d) ok = d == a || shapes[i][d] == shapes[0][d];
    if (!ok)
      fail("{}: input {} is of shape {}; on axis {} it takes inputs of shape {} but for that axis", label(), i,
           shapes[i].str_with_batch(), axis_, shapes[0].str_with_batch());
    out[a] += shapes[i][a];
  }
  return out;
}

Tensor Concatenate::call_inputs(std::span<const Tensor> xs, const CallContext& ctx) {
  (void)ctx;
  check_inputs(xs);
  return ops::concat(xs, axis_);  // both count the batch axis
}

// --- the graph ---

void Graph::finish(size_t num_layers) {
  last_use.assign(nodes.size(), nodes.size());
  auto check = [&](int from, size_t at, const char* what) {
    if (from >= 0 ? static_cast<size_t>(from) >= at : static_cast<size_t>(-1 - from) >= num_inputs())
      fail("graph: {} of node {} is {}, not an earlier node (< {}) or an input (-1 … -{})", what, at, from, at,
           num_inputs());
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].layer >= num_layers) fail("graph: node {} calls layer {} of {}", i, nodes[i].layer, num_layers);
    if (nodes[i].inputs.empty()) fail("graph: node {} has no inputs", i);
    for (int from : nodes[i].inputs) {
      check(from, i, "an input");
      if (from >= 0) last_use[static_cast<size_t>(from)] = i;
    }
  }
  if (outputs.empty()) fail("graph: has no outputs");
  for (int from : outputs) check(from, nodes.size(), "an output");
}

namespace {

// Moves x to `layer`'s device (an unplaced layer: `home`).
Tensor on_layer_device(const Layer& layer, const Tensor& x, Device home) {
  return ops::to_device(x, layer.device().value_or(home));
}

std::vector<Tensor> node_inputs(const Graph::Node& node, std::span<const Tensor> inputs,
                                const std::vector<Tensor>& values) {
  std::vector<Tensor> xs;
  for (int from : node.inputs)
    xs.push_back(from >= 0 ? values[static_cast<size_t>(from)] : inputs[static_cast<size_t>(-1 - from)]);
  return xs;
}

}  // namespace

std::vector<Tensor> call_network(const Network& net, std::span<const Tensor> inputs, const CallContext& ctx) {
  if (net.graph == nullptr) {
    if (inputs.size() != 1) fail("call_network: a chain of layers takes one input, got {}", inputs.size());
    return {call_layers(net.layers, inputs[0], ctx)};
  }
  const Graph& g = *net.graph;
  if (inputs.size() != g.num_inputs())
    fail("call_network: the model takes {} inputs, got {}", g.num_inputs(), inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!inputs[k].defined()) fail("call_network: input {} is undefined", k);
  Device home = inputs[0].device();
  std::vector<Tensor> values(g.nodes.size());
  std::vector<bool> output(g.nodes.size(), false);
  for (int o : g.outputs)
    if (o >= 0) output[static_cast<size_t>(o)] = true;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Layer& layer = *net.layers[g.nodes[i].layer];
    std::optional<ComputeOn> on;
    if (layer.device()) on.emplace(*layer.device());
    std::vector<Tensor> xs = node_inputs(g.nodes[i], inputs, values);
    for (Tensor& x : xs) x = on_layer_device(layer, x, home);
    if (auto* merge = dynamic_cast<Merge*>(&layer)) values[i] = merge->call_inputs(xs, ctx);
    else values[i] = layer.call(xs[0], ctx);
    add_activity_penalty(layer, values[i], ctx, home);
    for (int from : g.nodes[i].inputs)  // an intermediate's last reader has run: let it go
      if (from >= 0 && g.last_use[static_cast<size_t>(from)] == i && !output[static_cast<size_t>(from)])
        values[static_cast<size_t>(from)] = Tensor();
  }
  std::vector<Tensor> out;
  for (int o : g.outputs)
    out.push_back(ops::to_device(o >= 0 ? values[static_cast<size_t>(o)] : inputs[static_cast<size_t>(-1 - o)], home));
  return out;
}

Tensor call_network(const Network& net, const Tensor& x, const CallContext& ctx) {
  if (net.graph == nullptr) return call_layers(net.layers, x, ctx);
  std::vector<Tensor> outs = net.graph->num_inputs() == 1 ? call_network(net, std::span<const Tensor>(&x, 1), ctx)
                                                          : call_network(net, unpack_inputs(*net.graph, x), ctx);
  if (outs.size() == 1) return outs[0];
  Tensor packed = pack_inputs(outs);  // several outputs side by side, each kept for its loss
  ops::note_parts(packed, std::move(outs));
  return packed;
}

int64_t Graph::packed_width() const {
  int64_t width = 0;
  for (const Shape& s : input_shapes) width += s.numel();
  return width;
}

Tensor pack_inputs(std::span<const Tensor> inputs) {
  if (inputs.empty()) fail("pack_inputs: no inputs");
  std::vector<Tensor> flat;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || x.rank() < 1) fail("pack_inputs: input {} needs a batch axis", k);
    if (x.dim(0) != inputs[0].dim(0))
      fail("pack_inputs: input {} has {} rows, input 0 has {}", k, x.dim(0), inputs[0].dim(0));
    flat.push_back(ops::reshape(x.contiguous(), {x.dim(0), x.dim(0) == 0 ? 0 : x.numel() / x.dim(0)}));
  }
  return ops::concat(flat, 1);
}

std::vector<Tensor> unpack_inputs(const Graph& graph, const Tensor& packed) {
  int64_t width = graph.packed_width();
  if (!packed.defined() || packed.rank() != 2 || packed.dim(1) != width) {
    std::string shapes;
    for (const Shape& s : graph.input_shapes) shapes += (shapes.empty() ? "" : ", ") + s.str_with_batch();
    fail("a model of {} inputs ({}) takes them packed as (rows, {}) (pack_inputs), got {}", graph.num_inputs(), shapes,
         width, packed.defined() ? packed.shape().str() : "(undefined)");
  }
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (const Shape& s : graph.input_shapes) {
    Shape shape{packed.dim(0)};
    for (int64_t d : s) shape.push_back(d);
    out.push_back(ops::reshape(ops::columns(packed, offset, offset + s.numel()), shape));
    offset += s.numel();
  }
  return out;
}

std::vector<Tensor> unpack_outputs(std::span<const Shape> shapes, const Tensor& packed) {
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const Shape& s : shapes) {
    Tensor part = ops::part_columns(packed, at, at + s.numel());
    Shape full{packed.dim(0)};
    for (int64_t d : s) full.push_back(d);
    out.push_back(part.shape() == full ? part : ops::reshape(part, full));
    at += s.numel();
  }
  return out;
}

void call_network_parts(const Network& net, BatchParts& parts) {
  auto penalties = [&](const Layer& layer, std::span<const Tensor> outs) {
    for (size_t p = 0; p < outs.size(); ++p) add_activity_penalty(layer, outs[p], parts.contexts[p], outs[p].device());
  };
  if (net.graph == nullptr) {
    for (const auto& layer : net.layers) {
      layer->call_parts(parts);
      penalties(*layer, parts.h);
    }
    return;
  }
  const Graph& g = *net.graph;
  if (g.outputs.size() != 1)
    fail("deterministic training: a model of {} outputs is not run part by part", g.outputs.size());
  size_t count = parts.h.size();
  std::vector<std::vector<Tensor>> inputs;  // per part, the model's inputs
  for (const Tensor& h : parts.h) inputs.push_back(g.num_inputs() == 1 ? std::vector<Tensor>{h} : unpack_inputs(g, h));
  std::vector<std::vector<Tensor>> values(g.nodes.size());
  auto value = [&](int from, size_t p) -> const Tensor& {
    return from >= 0 ? values[static_cast<size_t>(from)][p] : inputs[p][static_cast<size_t>(-1 - from)];
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Layer& layer = *net.layers[g.nodes[i].layer];
    const Graph::Node& node = g.nodes[i];
    std::vector<Tensor> outs(count);
    if (auto* merge = dynamic_cast<Merge*>(&layer)) {
      for (size_t p = 0; p < count; ++p) {
        parts.use_part(p);
        std::vector<Tensor> xs;
        for (int from : node.inputs) xs.push_back(value(from, p));
        outs[p] = merge->call_inputs(xs, parts.contexts[p]);
      }
    } else {
      for (size_t p = 0; p < count; ++p) outs[p] = value(node.inputs[0], p);
      BatchParts step{outs, parts.contexts, parts.use_part, parts.gather};
      layer.call_parts(step);
    }
    penalties(layer, outs);
    values[i] = std::move(outs);
    for (int from : node.inputs)
      if (from >= 0 && g.last_use[static_cast<size_t>(from)] == i && from != g.outputs[0])
        values[static_cast<size_t>(from)].clear();
  }
  for (size_t p = 0; p < count; ++p) parts.h[p] = value(g.outputs[0], p);
}

// --- symbolic tensors ---

const Shape& SymbolicTensor::shape() const { return node_->shape; }

SymbolicTensor Input(Shape shape, std::string name) {
  for (int d = 0; d < shape.rank(); ++d)
    if (shape[d] <= 0) fail("Input: shape {} needs positive dimensions (the batch axis is not given)", shape.str());
  auto node = std::make_shared<SymbolicNode>();
  node->shape = std::move(shape);
  node->name = std::move(name);
  return SymbolicTensor(node);
}

SymbolicTensor call_symbolic(const std::shared_ptr<Layer>& layer, std::span<const SymbolicTensor> inputs) {
  if (!layer) fail("call_symbolic: the layer is null");
  if (inputs.empty()) fail("{}: called on no inputs", layer->label());
  std::vector<Shape> shapes;
  for (const SymbolicTensor& x : inputs) {
    if (!x.node()) fail("{}: called on an empty symbolic tensor", layer->label());
    shapes.push_back(x.shape());
  }
  auto* merge = dynamic_cast<Merge*>(layer.get());
  if (merge == nullptr && inputs.size() != 1)
    fail("{}: takes one input, got a list of {}", layer->label(), inputs.size());
  // The output's shape, from the layer where it is built, else from an unbuilt copy (the layer
  // itself is built by the model, with the model's seed).
  Shape out;
  if (layer->built()) {
    out = merge != nullptr ? merge->build_inputs(shapes, 0) : layer->build(shapes[0], 0);
  } else {
    std::shared_ptr<Layer> probe = layer->clone();
    auto* m = dynamic_cast<Merge*>(probe.get());
    out = m != nullptr ? m->build_inputs(shapes, 0) : probe->build(shapes[0], 0);
  }
  auto node = std::make_shared<SymbolicNode>();
  node->layer = layer;
  node->inputs.assign(inputs.begin(), inputs.end());
  node->shape = out;
  return SymbolicTensor(node);
}

SymbolicTensor Layer::operator()(std::span<const SymbolicTensor> xs) {
  std::shared_ptr<Layer> self = weak_from_this().lock();
  if (!self) {  // a value: a copy of it goes in the graph, once
    if (called_as_value_)
      fail(
          "{}: called a second time as a value, which would make a second layer; to share a layer (and its "
          "variables), make it with std::make_shared and call *it",
          label());
    self = clone();
    called_as_value_ = true;
  }
  return call_symbolic(self, xs);
}
SymbolicTensor Layer::operator()(const SymbolicTensor& x) { return (*this)(std::span<const SymbolicTensor>(&x, 1)); }
SymbolicTensor Layer::operator()(std::initializer_list<SymbolicTensor> xs) {
  return (*this)(std::span<const SymbolicTensor>(xs.begin(), xs.size()));
}

Traced trace(std::span<const SymbolicTensor> inputs, std::span<const SymbolicTensor> outputs,
             const std::string& model) {
  if (inputs.empty()) fail("Functional \"{}\": needs at least one input", model);
  if (outputs.empty()) fail("Functional \"{}\": needs at least one output", model);
  Traced t;
  std::map<const SymbolicNode*, int> index;  // a node's: its graph index, or -1 - k for input k
  for (size_t k = 0; k < inputs.size(); ++k) {
    const SymbolicNode* n = inputs[k].node().get();
    if (n == nullptr || n->layer) fail("Functional \"{}\": input {} is not a keras.Input", model, k);
    if (index.count(n) != 0) fail("Functional \"{}\": input {} is given twice", model, k);
    index[n] = -1 - static_cast<int>(k);
    t.input_names.push_back(n->name.empty() ? (k == 0 ? "input_layer" : fmt::format("input_layer_{}", k)) : n->name);
  }
  t.graph.input_shapes.clear();
  for (const SymbolicTensor& in : inputs) t.graph.input_shapes.push_back(in.shape());
  std::map<const Layer*, size_t> layer_index;
  // Post-order from each output: a node after every node it reads (an explicit stack: deep models).
  std::set<const SymbolicNode*> visiting;
  for (const SymbolicTensor& out : outputs) {
    std::vector<std::pair<const SymbolicNode*, size_t>> stack{{out.node().get(), 0}};
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (n == nullptr) fail("Functional \"{}\": an output is an empty symbolic tensor", model);
      if (index.count(n) != 0) {
        stack.pop_back();
        continue;
      }
      if (!n->layer)
        fail("Functional \"{}\": an output needs an Input of shape {} that is not among the model's inputs", model,
             n->shape.str_with_batch());
      if (next < n->inputs.size()) {
        const SymbolicNode* in = n->inputs[next++].node().get();
        if (index.count(in) == 0) stack.push_back({in, 0});
        continue;
      }
      auto [at, added] = layer_index.try_emplace(n->layer.get(), t.layers.size());
      if (added) t.layers.push_back(n->layer);
      Graph::Node node{at->second, {}};
      for (const SymbolicTensor& in : n->inputs) node.inputs.push_back(index.at(in.node().get()));
      index[n] = static_cast<int>(t.graph.nodes.size());
      t.graph.nodes.push_back(std::move(node));
      stack.pop_back();
    }
  }
  for (const SymbolicTensor& out : outputs) t.graph.outputs.push_back(index.at(out.node().get()));
  t.graph.finish(t.layers.size());
  // Names: each unnamed layer its default name, numbered past those taken.
  std::set<std::string> taken(t.input_names.begin(), t.input_names.end());
  for (const auto& l : t.layers)
    if (!l->name().empty() && !taken.insert(l->name()).second)
      fail("Functional \"{}\": two layers are named \"{}\"", model, l->name());
  for (const auto& l : t.layers) {
    if (!l->name().empty()) continue;
    std::string name = l->default_name();
    for (int k = 1; taken.count(name) != 0; ++k) name = fmt::format("{}_{}", l->default_name(), k);
    taken.insert(name);
    l->set_name(name);
  }
  return t;
}

}  // namespace tandem::layers
