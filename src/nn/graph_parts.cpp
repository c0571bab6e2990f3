// Cutting a graph into consecutive parts (tandem/graph.h: crossing_tensors, graph_part).
#include <algorithm>
#include <set>

#include "tandem/graph.h"

namespace tandem::layers {

namespace {

// The node where the calls of layers [c, L) begin, if every call of the layers before c comes
// before all of theirs (else none).
std::optional<size_t> boundary(const Graph& graph, size_t num_layers, size_t c) {
  size_t last_before = 0, first_after = graph.nodes.size();
  bool any_before = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].layer < c) {
      last_before = i;
      any_before = true;
    } else {
      first_after = std::min(first_after, i);
    }
  }
  if (c == 0 || c >= num_layers || !any_before || last_before > first_after) return std::nullopt;
  return first_after;
}

// The tensors made before node p (nodes before it, and the model's inputs) that are read from p on.
std::set<int> crossing_at(const Graph& graph, size_t p) {
  std::set<int> crossing;
  for (size_t i = p; i < graph.nodes.size(); ++i)
    for (int from : graph.nodes[i].inputs)
      if (from < 0 || static_cast<size_t>(from) < p) crossing.insert(from);
  for (int from : graph.outputs)
    if (from < 0 || static_cast<size_t>(from) < p) crossing.insert(from);
  return crossing;
}

}  // namespace

std::vector<std::optional<int>> crossing_tensors(const Graph& graph, size_t num_layers) {
  std::vector<std::optional<int>> out(num_layers);
  for (size_t c = 1; c < num_layers; ++c)
    if (std::optional<size_t> p = boundary(graph, num_layers, c)) {
      std::set<int> crossing = crossing_at(graph, *p);
      if (crossing.size() == 1) out[c] = *crossing.begin();
    }
  return out;
}

Graph graph_part(const Graph& graph, std::span<const std::shared_ptr<Layer>> layers, size_t begin, size_t end) {
  size_t n = layers.size();
  if (begin >= end || end > n) fail("graph_part: layers [{}, {}) of {}", begin, end, n);
  std::vector<std::optional<int>> cuts = crossing_tensors(graph, n);
  auto at = [&](size_t c) -> size_t {
    if (c == 0) return 0;
    if (c == n) return graph.nodes.size();
    if (!cuts[c])
      fail("graph_part: no cut before layer {} ({}): more than one tensor crosses there", c, layers[c]->label());
    return *boundary(graph, n, c);
  };
  size_t p = at(begin), q = at(end);
  auto shape_of = [&](int t) {
    return t >= 0 ? layers[graph.nodes[static_cast<size_t>(t)].layer]->output_shape()
                  : graph.input_shapes[static_cast<size_t>(-1 - t)];
  };
  Graph part;
  part.input_shapes = begin == 0 ? graph.input_shapes : std::vector<Shape>{shape_of(*cuts[begin])};
  auto local = [&](int from) {
    if (from >= 0 && static_cast<size_t>(from) >= p) return static_cast<int>(static_cast<size_t>(from) - p);
    if (begin == 0) return from;  // a model input
    return -1;                    // the one tensor that crosses into the part (cuts[begin] says it is `in`)
  };
  for (size_t i = p; i < q; ++i) {
    Graph::Node node{graph.nodes[i].layer - begin, {}};
    for (int from : graph.nodes[i].inputs) node.inputs.push_back(local(from));
    part.nodes.push_back(std::move(node));
  }
  if (end == n) {
    for (int from : graph.outputs) part.outputs.push_back(local(from));
  } else {
    part.outputs = {local(*cuts[end])};
  }
  part.finish(end - begin);
  return part;
}

}  // namespace tandem::layers
