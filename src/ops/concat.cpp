// concat: tensors of one shape but along `axis` -> their slices side by side along it.
// columns: x:(R, C) -> columns [begin, end) of it, (R, end - begin).
// zero_pad2d: x:(B,H,W,C) -> (B, top + H + bottom, left + W + right, C), zeros around.
// Both are block copies (Backend::copy_blocks); backward copies each input's slice of dy back.
#include <numeric>

#include "core/tensor_impl.h"
#include "ops/checks.h"

namespace tandem::ops {
namespace {

// Where one input sits in the output, as copy_blocks takes it: rows of `width` floats, `outer` of
// them, at `offset` in rows `out_width` wide.
struct Place {
  int64_t outer, width, offset, out_width;
};

Tensor copy_out(const Tensor& dy, const Shape& shape, const Place& p) {
  Tensor g = Tensor::empty(shape, DType::Float32, dy.device());
  kernels::backend(dy.device())
      .copy_blocks(dy.buffer<float>() + p.offset, g.buffer<float>(), 1, p.outer, p.width, 0, p.out_width, 0, p.width);
  return g;
}

struct ConcatNode : autograd::Node {
  std::vector<Shape> shapes;
  std::vector<Place> places;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    for (size_t i = 0; i < shapes.size(); ++i)
      if (needs(static_cast<int>(i))) tape.accumulate(input_slots[i], copy_out(dy, shapes[i], places[i]));
  }
};

// At most four inputs (a node's slots).
Tensor concat_few(std::span<const Tensor> xs, int axis) {
  const Shape& first = xs[0].shape();
  int64_t outer = 1, inner = 1, along = 0;
  for (int d = 0; d < axis; ++d) outer *= first[d];
  for (int d = axis + 1; d < first.rank(); ++d) inner *= first[d];
  for (const Tensor& x : xs) along += x.dim(axis);
  Shape out_shape = first;
  out_shape[axis] = along;
  Tensor y = Tensor::empty(out_shape, DType::Float32, xs[0].device());
  std::vector<Place> places;
  std::vector<Tensor> kept;
  int64_t offset = 0;
  for (const Tensor& x_in : xs) {
    Tensor x = x_in.contiguous();
    Place p{outer, x.dim(axis) * inner, offset, along * inner};
    kernels::backend(y.device())
        .copy_blocks(x.buffer<float>(), y.buffer<float>() + p.offset, 1, p.outer, p.width, 0, p.width, 0, p.out_width);
    places.push_back(p);
    offset += p.width;
  }
  std::array<const Tensor*, 4> in{};
  for (size_t i = 0; i < xs.size(); ++i) in[i] = &xs[i];
  auto* tape = autograd::tracking_tape({in[0], in[1], in[2], in[3]});
  if (tape != nullptr) {
    auto* node = new ConcatNode();
    for (const Tensor& x : xs) node->shapes.push_back(x.shape());
    node->places = std::move(places);
    autograd::record(tape, node, {in[0], in[1], in[2], in[3]}, y);
  }
  return y;
}

struct ColumnsNode : autograd::Node {
  Shape x_shape;
  Place place;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    Tensor g = Tensor::zeros(x_shape, DType::Float32, dy.device());
    kernels::backend(dy.device())
        .copy_blocks(dy.buffer<float>(), g.buffer<float>() + place.offset, 1, place.outer, place.width, 0, place.width,
                     0, place.out_width);
    tape.accumulate(input_slots[0], g);
  }
};

struct PadNode : autograd::Node {
  Shape x_shape;
  int64_t top = 0, left = 0;
  void backward(GradientTape& tape, const Tensor& dy_in) override {
    Tensor dy = dy_in.contiguous();
    int64_t n = x_shape[0], h = x_shape[1], w = x_shape[2], c = x_shape[3], oh = dy.dim(1), ow = dy.dim(2);
    Tensor g = Tensor::empty(x_shape, DType::Float32, dy.device());
    kernels::backend(dy.device())
        .copy_blocks(dy.buffer<float>() + (top * ow + left) * c, g.buffer<float>(), n, h, w * c, oh * ow * c, ow * c,
                     h * w * c, w * c);
    tape.accumulate(input_slots[0], g);
  }
};

}  // namespace

Tensor concat(std::span<const Tensor> xs, int axis) {
  if (xs.empty()) fail("concat: needs at least one tensor, got none");
  for (size_t i = 0; i < xs.size(); ++i) {
    std::string arg = fmt::format("xs[{}]", i);
    require_float(xs[i], "concat", arg.c_str());
    require_device(xs[i], xs[0], "concat", arg.c_str());
  }
  const Shape& first = xs[0].shape();
  int rank = first.rank();
  if (axis < -rank || axis >= rank) fail("concat: axis {} is outside shapes of rank {}", axis, rank);
  if (axis < 0) axis += rank;
  for (size_t i = 1; i < xs.size(); ++i) {
    bool ok = xs[i].rank() == rank;
    for (int d = 0; ok && d < rank; ++d) ok = d == axis || xs[i].dim(d) == first[d];
    if (!ok)
      fail("concat: xs[{}] has shape {}, expected {} but for axis {}", i, xs[i].shape().str(), first.str(), axis);
  }
  if (xs.size() == 1) return xs[0];
  if (xs.size() <= 4) return concat_few(xs, axis);
  Tensor head = concat_few(xs.first(4), axis);
  std::vector<Tensor> rest{head};
  rest.insert(rest.end(), xs.begin() + 4, xs.end());
  return concat(rest, axis);
}

Tensor columns(const Tensor& x, int64_t begin, int64_t end) {
  require_float(x, "columns", "x");
  require_rank(x, 2, "columns", "x");
  if (begin < 0 || end < begin || end > x.dim(1))
    fail("columns: [{}, {}) is not a range of the {} columns of x", begin, end, x.dim(1));
  Tensor xc = x.contiguous();
  Place p{x.dim(0), end - begin, begin, x.dim(1)};
  Tensor y = Tensor::empty({x.dim(0), end - begin}, DType::Float32, x.device());
  if (y.numel() > 0) y = copy_out(xc, y.shape(), p);
  if (auto* tape = autograd::tracking_tape({&x})) {
    auto* node = new ColumnsNode();
    node->x_shape = x.shape();
    node->place = p;
    autograd::record(tape, node, {&x}, y);
  }
  return y;
}

namespace {
struct PartsOf : TensorNote {
  explicit PartsOf(std::vector<Tensor> p) : parts(std::move(p)) {}
  std::vector<Tensor> parts;
};
}  // namespace

void note_parts(const Tensor& packed, std::vector<Tensor> parts) {
  packed.impl()->note = std::make_unique<PartsOf>(std::move(parts));
}

Tensor part_columns(const Tensor& packed, int64_t begin, int64_t end) {
  if (const auto* of = dynamic_cast<const PartsOf*>(packed.impl()->note.get())) {
    int64_t at = 0;
    for (const Tensor& part : of->parts) {
      int64_t width = part.dim(0) == 0 ? 0 : part.numel() / part.dim(0);
      if (at == begin && at + width == end && part.dim(0) == packed.dim(0)) return part;
      at += width;
    }
  }
  return columns(packed, begin, end);
}

Tensor zero_pad2d(const Tensor& x, int64_t top, int64_t bottom, int64_t left, int64_t right) {
  require_float(x, "zero_pad2d", "x");
  require_rank(x, 4, "zero_pad2d", "x");
  if (top < 0 || bottom < 0 || left < 0 || right < 0)
    fail("zero_pad2d: padding must be non-negative, got top {} bottom {} left {} right {}", top, bottom, left, right);
  Tensor xc = x.contiguous();
  int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3), oh = h + top + bottom, ow = w + left + right;
  Tensor y = Tensor::zeros({n, oh, ow, c}, DType::Float32, x.device());
  kernels::backend(x.device())
      .copy_blocks(xc.buffer<float>(), y.buffer<float>() + (top * ow + left) * c, n, h, w * c, h * w * c, w * c,
                   oh * ow * c, ow * c);
  if (auto* tape = autograd::tracking_tape({&x})) {
    auto* node = new PadNode();
    node->x_shape = x.shape();
    node->top = top;
    node->left = left;
    autograd::record(tape, node, {&x}, y);
  }
  return y;
}

}  // namespace tandem::ops
