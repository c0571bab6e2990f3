// The value types a tensor is made of (tandem/tensor.h): dtypes' names and sizes, devices' names,
// shapes and their checks.
#include <string>

#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Int32: return "int32";
    case DType::UInt8: return "uint8";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 4;
    case DType::Int32: return 4;
    case DType::UInt8: return 1;
  }
  return 0;
}

std::string Device::name() const {
  switch (kind) {
    case Kind::CPU: return index == 0 ? "cpu" : fmt::format("cpu:{}", index);
    case Kind::CUDA: return fmt::format("cuda:{}", index);
    case Kind::Emulated: return fmt::format("emulated:{}", index);
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  if (dims.size() > kMaxRank) fail("Shape: rank {} exceeds the maximum of {}", dims.size(), kMaxRank);
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

void Shape::push_back(int64_t d) {
  if (rank_ >= kMaxRank) fail("Shape: rank would exceed the maximum of {}", kMaxRank);
  if (d < 0) fail("Shape: dimension {} is negative ({})", rank_, d);
  dims_[static_cast<size_t>(rank_++)] = d;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<size_t>(i)] != o.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  if (rank_ == 1) s += ",";
  return s + ")";
}

std::string Shape::str_with_batch() const {
  std::string s = "(None";
  for (int i = 0; i < rank_; ++i) s += ", " + std::to_string(dims_[static_cast<size_t>(i)]);
  return s + ")";
}

}  // namespace tandem
