// Differentiable collectives over a group of ranks (ops.h): tensor parallelism's f (copy forward,
// sum backward) and g (sum forward, copy backward), and the column gather and scatter between a
// split layer's slices and whole features. Every rank calls each in the same order; the sums run
// in rank order (the communicator's promise), so every rank holds the same bits.
#include <algorithm>
#include <numeric>

#include "ops/checks.h"
#include "tandem/collectives/communicator.h"

namespace tandem::ops {
namespace {

Tensor summed(const Tensor& x, distribute::Communicator& group) {
  Tensor out = x.clone();  // contiguous
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

// Rank `rank`'s columns of a (rows, features) tensor, as a tensor of their own.
Tensor columns_of(const Tensor& x, std::span<const int64_t> widths, int rank) {
  int64_t first = first_column(widths, rank);
  return x.columns(first, first + widths[static_cast<size_t>(rank)]).clone();
}

// Every rank's columns side by side: one all-gather of blocks padded to the widest slice.
Tensor gathered(const Tensor& x, distribute::Communicator& group, std::span<const int64_t> widths) {
  int64_t rows = x.dim(0), widest = *std::max_element(widths.begin(), widths.end());
  int64_t whole = std::accumulate(widths.begin(), widths.end(), int64_t{0});
  Tensor block = Tensor::zeros({rows, widest});
  Tensor mine = block.columns(0, x.dim(1));
  mine.copy_from(x);
  Tensor all = Tensor::empty({group.size(), rows, widest});
  group.all_gather(block.data<float>(), block.numel(), all.data<float>(), distribute::DataType::Float32);
  Tensor out = Tensor::empty({rows, whole});
  for (int r = 0; r < group.size(); ++r) {
    int64_t first = first_column(widths, r), width = widths[static_cast<size_t>(r)];
    Tensor theirs = out.columns(first, first + width);
    theirs.copy_from(all.row(r).columns(0, width));
  }
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
      case Kind::Gather: tape.accumulate(input_slots[0], columns_of(dy, widths, group->rank())); break;
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
  Tensor y = columns_of(x, widths, group.rank());
  return recorded(x, y, GroupNode::Kind::Scatter, group, widths);
}

}  // namespace tandem::ops
