// Differentiable collectives over a group of ranks (ops.h): tensor parallelism's f (copy forward,
// sum backward) and g (sum forward, copy backward), and the column gather and scatter between a
// split layer's slices and whole features. Every rank calls each in the same order; the sums run
// in rank order (the communicator's promise), so every rank holds the same bits.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops/checks.h"
#include "tandem/collectives/communicator.h"

namespace tandem::ops {
namespace {

Tensor summed(const Tensor& x, distribute::Communicator& group) {
  Tensor out = x.contiguous().clone();
  group.all_reduce(out.data<float>(), out.numel(), distribute::DataType::Float32, distribute::ReduceOp::Sum);
  return out;
}

void check_widths(const Tensor& x, distribute::Communicator& group, std::span<const int64_t> widths, const char* op,
                  bool sliced) {
  require_float(x, op, "x");
  require_rank(x, 2, op, "x");
  if (static_cast<int>(widths.size()) != group.size())
    fail("{}: {} widths for a group of {} ranks", op, widths.size(), group.size());
  int64_t whole = std::accumulate(widths.begin(), widths.end(), int64_t{0});
  int64_t expected = sliced ? widths[static_cast<size_t>(group.rank())] : whole;
  if (x.dim(1) != expected)
    fail("{}: rank {}'s x has {} features, expected {} ({} of the {} the widths add up to)", op, group.rank(), x.dim(1),
         expected, sliced ? "its slice" : "all", whole);
}

int64_t first_column(std::span<const int64_t> widths, int rank) {
  return std::accumulate(widths.begin(), widths.begin() + rank, int64_t{0});
}

// Columns [first, first + width) of a (rows, features) tensor.
Tensor columns(const Tensor& x_in, int64_t first, int64_t width) {
  Tensor x = x_in.contiguous();
  int64_t rows = x.dim(0), features = x.dim(1);
  Tensor out = Tensor::empty({rows, width});
  const float* from = x.data<float>();
  float* to = out.data<float>();
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(to + i * width, from + i * features + first, static_cast<size_t>(width) * sizeof(float));
  return out;
}

// Every rank's columns side by side: one all-gather of blocks padded to the widest slice.
Tensor gathered(const Tensor& x_in, distribute::Communicator& group, std::span<const int64_t> widths) {
  Tensor x = x_in.contiguous();
  int64_t rows = x.dim(0), widest = *std::max_element(widths.begin(), widths.end());
  int64_t whole = std::accumulate(widths.begin(), widths.end(), int64_t{0});
  std::vector<float> block(static_cast<size_t>(rows * widest), 0.0f);
  int64_t mine = x.dim(1);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(block.data() + i * widest, x.data<float>() + i * mine, static_cast<size_t>(mine) * sizeof(float));
  std::vector<float> all(block.size() * widths.size());
  group.all_gather(block.data(), static_cast<int64_t>(block.size()), all.data(), distribute::DataType::Float32);
  Tensor out = Tensor::empty({rows, whole});
  float* to = out.data<float>();
  for (size_t r = 0, first = 0; r < widths.size(); first += static_cast<size_t>(widths[r]), ++r)
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(to + i * whole + static_cast<int64_t>(first),
                  all.data() + static_cast<int64_t>(r) * rows * widest + i * widest,
                  static_cast<size_t>(widths[r]) * sizeof(float));
  return out;
}

struct GroupNode : autograd::Node {
  enum class Kind { Copy, Reduce, Gather, Scatter } kind;
  distribute::Communicator* group = nullptr;
  std::vector<int64_t> widths;
  void backward(GradientTape& tape, const Tensor& dy) override {
    switch (kind) {
      case Kind::Copy: tape.accumulate(input_slots[0], summed(dy, *group)); break;
      case Kind::Reduce: tape.accumulate(input_slots[0], dy); break;
      case Kind::Gather:
        tape.accumulate(input_slots[0],
                        columns(dy, first_column(widths, group->rank()), widths[static_cast<size_t>(group->rank())]));
        break;
      case Kind::Scatter: tape.accumulate(input_slots[0], gathered(dy, *group, widths)); break;
    }
  }
};

Tensor recorded(const Tensor& x, Tensor y, GroupNode::Kind kind, distribute::Communicator& group,
                std::span<const int64_t> widths) {
  if (auto* tape = autograd::tracking_tape({&x})) {
    auto* node = new GroupNode();
    node->kind = kind;
    node->group = &group;
    node->widths.assign(widths.begin(), widths.end());
    autograd::record(tape, node, {&x}, y);
  }
  return y;
}

}  // namespace

Tensor copy_to_group(const Tensor& x, distribute::Communicator& group) {
  require_float(x, "copy_to_group", "x");
  return recorded(x, x.contiguous().reshape(x.shape()), GroupNode::Kind::Copy, group, {});  // a view of its own
}

Tensor reduce_from_group(const Tensor& x, distribute::Communicator& group) {
  require_float(x, "reduce_from_group", "x");
  return recorded(x, summed(x, group), GroupNode::Kind::Reduce, group, {});
}

Tensor gather_from_group(const Tensor& x, distribute::Communicator& group, std::span<const int64_t> widths) {
  check_widths(x, group, widths, "gather_from_group", true);
  return recorded(x, gathered(x, group, widths), GroupNode::Kind::Gather, group, widths);
}

Tensor scatter_to_group(const Tensor& x, distribute::Communicator& group, std::span<const int64_t> widths) {
  check_widths(x, group, widths, "scatter_to_group", false);
  Tensor y = columns(x, first_column(widths, group.rank()), widths[static_cast<size_t>(group.rank())]);
  return recorded(x, y, GroupNode::Kind::Scatter, group, widths);
}

}  // namespace tandem::ops
