#pragma once
// Models that are graphs (Keras' functional API), below the model: layers of several inputs (Add,
// Subtract, Multiply, Concatenate), symbolic tensors that layers are applied to (Input, apply),
// the graph traced from them, and running a model's layers as a chain or as a graph
// (call_network). A model (tandem/model.h: Functional) holds the traced layers and graph.
#include <concepts>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tandem/layers.h"

namespace tandem::layers {

// A layer of several inputs (Keras' merge layers): built for their shapes, called on a list.
class Merge : public Layer {
 public:
  // Creates the variables (none here) for inputs of these per-sample shapes; the output's shape.
  Shape build_inputs(std::span<const Shape> shapes, uint64_t seed);
  virtual Tensor call_inputs(std::span<const Tensor> xs, const CallContext& ctx) = 0;
  // One tensor is refused, naming the layer: a merge layer takes a list.
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  bool stacks_rows() const override { return true; }

 protected:
  Merge(std::string name, size_t min_inputs, size_t max_inputs)
      : Layer(std::move(name), std::nullopt), min_inputs_(min_inputs), max_inputs_(max_inputs) {}
  Shape do_build(const Shape& input_shape, uint64_t seed) override;
  virtual Shape merged_shape(std::span<const Shape> shapes) const = 0;
  void check_inputs(std::span<const Tensor> xs) const;
  std::vector<Shape> input_shapes_;

 private:
  size_t min_inputs_, max_inputs_;
};

// Elementwise over inputs of one shape: their sum, a − b (two inputs), their product.
class Add : public Merge {
 public:
  explicit Add(std::string name = "") : Merge(std::move(name), 2, 64) {}
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Add>(*this); }
  std::string type() const override { return "Add"; }
  std::string default_name() const override { return "add"; }
  Tensor call_inputs(std::span<const Tensor> xs, const CallContext& ctx) override;

 protected:
  Shape merged_shape(std::span<const Shape> shapes) const override;
};

class Subtract : public Merge {
 public:
  explicit Subtract(std::string name = "") : Merge(std::move(name), 2, 2) {}
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Subtract>(*this); }
  std::string type() const override { return "Subtract"; }
  std::string default_name() const override { return "subtract"; }
  Tensor call_inputs(std::span<const Tensor> xs, const CallContext& ctx) override;

 protected:
  Shape merged_shape(std::span<const Shape> shapes) const override;
};

class Multiply : public Merge {
 public:
  explicit Multiply(std::string name = "") : Merge(std::move(name), 2, 64) {}
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Multiply>(*this); }
  std::string type() const override { return "Multiply"; }
  std::string default_name() const override { return "multiply"; }
  Tensor call_inputs(std::span<const Tensor> xs, const CallContext& ctx) override;

 protected:
  Shape merged_shape(std::span<const Shape> shapes) const override;
};

// Inputs of one shape but along `axis` (of the per-sample shape counted with the batch axis, as
// Keras: -1 the last), side by side along it.
class Concatenate : public Merge {
 public:
  explicit Concatenate(int axis = -1, std::string name = "") : Merge(std::move(name), 1, 64), axis_(axis) {}
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Concatenate>(*this); }
  std::string type() const override { return "Concatenate"; }
  std::string default_name() const override { return "concatenate"; }
  Tensor call_inputs(std::span<const Tensor> xs, const CallContext& ctx) override;
  int axis() const { return axis_; }

 protected:
  Shape merged_shape(std::span<const Shape> shapes) const override;

 private:
  int axis_;
};

// How a model's layers connect, in the order they run (a topological order): node i calls layer
// nodes[i].layer (an index into the model's layers) on its inputs, each the output of an earlier
// node (its index) or the model's input k (-1 - k). A layer called by several nodes (a shared
// layer) is one layer: its variables are used by each call, their gradients summed.
// A model of several inputs takes them as one tensor (pack_inputs: each row's inputs flattened,
// side by side in order), so that every strategy cuts and moves its rows as one model input's.
struct Graph {
  struct Node {
    size_t layer = 0;
    std::vector<int> inputs;
  };
  std::vector<Shape> input_shapes{Shape{}};  // per sample, one per model input
  size_t num_inputs() const { return input_shapes.size(); }
  int64_t packed_width() const;  // the packed inputs' per-sample size, Σ each input's
  std::vector<Node> nodes;
  std::vector<int> outputs;  // the model's outputs: nodes' outputs (or an input, -1 - k)
  // Per node: the last node that reads its output (nodes.size(): read by nobody after it runs,
  // kept when it is an output). Filled by finish(), which also checks the indices.
  std::vector<size_t> last_use;
  void finish(size_t num_layers);
};

// Cutting a graph into consecutive parts (a pipeline's stages), each of the model's layers
// [begin, end): a cut before layer c is possible where every call of the layers before c comes
// before every call of those from c on, and one tensor alone (a node's output, or a model input)
// passes from the calls before to the calls after (nothing else is read after the cut): between
// residual blocks, never inside one. crossing_tensors(g, L)[c], for c in 1 .. L - 1: that tensor
// (a node index, or -1 - k: input k), or none where no cut is possible before layer c.
std::vector<std::optional<int>> crossing_tensors(const Graph& graph, size_t num_layers);
// The part of `graph` made of layers [begin, end) (built; possible cuts at both ends, end = the
// layers' count for the last part): its calls renumbered, layers counted from `begin`, its input
// the tensor that crosses at `begin` (begin 0: the model's inputs), its output the one that
// crosses at `end` (the last part: the model's outputs).
Graph graph_part(const Graph& graph, std::span<const std::shared_ptr<Layer>> layers, size_t begin, size_t end);

// A model's layers and how they connect: a chain (graph null) runs them in order.
struct Network {
  std::span<const std::shared_ptr<Layer>> layers;
  const Graph* graph = nullptr;
};

// Runs the network on its inputs, each layer on its device (as call_layers), a graph node by node
// in order, each intermediate output let go after its last reader; the outputs on the first
// input's device. Activity penalties go to ctx.penalties.
std::vector<Tensor> call_network(const Network& net, std::span<const Tensor> inputs, const CallContext& ctx);
// A network on its input (a graph of several inputs: on them packed, pack_inputs); several
// outputs come packed the same way (ops::note_parts keeps each for its loss).
Tensor call_network(const Network& net, const Tensor& x, const CallContext& ctx);
// A model's inputs (the same rows each) as one tensor of (rows, Σ per-sample sizes), and back.
Tensor pack_inputs(std::span<const Tensor> inputs);
std::vector<Tensor> unpack_inputs(const Graph& graph, const Tensor& packed);
// A model's several outputs (per-sample `shapes`) from their packed tensor, each in its shape, on
// the tape (a custom loop's losses on each).
std::vector<Tensor> unpack_outputs(std::span<const Shape> shapes, const Tensor& packed);
// Deterministic replicated training: each node on every part before the next (Layer::call_parts,
// a merge layer part by part); parts.h holds the parts' inputs, then their outputs.
void call_network_parts(const Network& net, BatchParts& parts);

// A tensor of a model being written (Keras' KerasTensor): its per-sample shape and where it comes
// from, a model input or a layer applied to others.
struct SymbolicNode;
class SymbolicTensor {
 public:
  explicit SymbolicTensor(std::shared_ptr<const SymbolicNode> node) : node_(std::move(node)) {}
  const Shape& shape() const;  // per sample
  const std::shared_ptr<const SymbolicNode>& node() const { return node_; }

 private:
  std::shared_ptr<const SymbolicNode> node_;
};
struct SymbolicNode {
  std::shared_ptr<Layer> layer;  // null: a model input
  std::vector<SymbolicTensor> inputs;
  Shape shape;       // per sample
  std::string name;  // an input's (empty: named by the model)
};

// Keras' keras.Input(shape): a model input of per-sample shape `shape`.
SymbolicTensor Input(Shape shape, std::string name = "");
// A layer called on symbolic tensors (Layer::operator()): the output's shape is checked and worked
// out now (on an unbuilt copy where the layer is not built); the layer is built when a model is
// made from it, with the model's seed.
SymbolicTensor call_symbolic(const std::shared_ptr<Layer>& layer, std::span<const SymbolicTensor> inputs);

// The graph from `inputs` to `outputs`: the layers (each once, in the order first called; the
// unnamed named by their default names, unique within it), the nodes in a topological order.
// An output that needs an input not among `inputs` is refused, naming it.
struct Traced {
  std::vector<std::shared_ptr<Layer>> layers;
  Graph graph;
  std::vector<std::string> input_names;
};
Traced trace(std::span<const SymbolicTensor> inputs, std::span<const SymbolicTensor> outputs, const std::string& model);

}  // namespace tandem::layers
