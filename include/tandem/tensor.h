#pragma once
// Tensor: a reference-counted, strided view of pooled storage, with a dtype and a device.
#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem {

enum class DType : uint8_t { Float32, Int32, UInt8 };
std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::Int32;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::UInt8;
}

// Where a tensor's bytes live; ops reach the kernels of the tensor's device. Emulated: kernels and
// memory registered by a test, standing in for a device the host cannot read directly. The CPU's
// devices cpu:0 … cpu:N-1 are logical: core groups of the host with their own threads and memory
// limit (devices.h); cpu(0), the default, is named "cpu". CUDA: an NVIDIA GPU (cuda.h).
struct Device {
  enum class Kind : uint8_t { CPU, CUDA, Emulated } kind = Kind::CPU;
  int index = 0;
  static Device cpu(int index = 0) { return {Kind::CPU, index}; }
  static Device cuda(int index = 0) { return {Kind::CUDA, index}; }  // include/tandem/cuda.h
  bool operator==(const Device&) const = default;
  std::string name() const;
};

// A shape of up to 8 dimensions, stored inline so that making one never allocates.
class Shape {
 public:
  static constexpr int kMaxRank = 8;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  void push_back(int64_t d);
  bool operator==(const Shape& o) const;
  std::string str() const;             // "(25, 784)"
  std::string str_with_batch() const;  // a per-sample shape as Keras prints it: "(None, 784)"
 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct Storage;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& o);
  Tensor(Tensor&& o) noexcept : impl_(o.impl_) { o.impl_ = nullptr; }
  Tensor& operator=(const Tensor& o);
  Tensor& operator=(Tensor&& o) noexcept;
  ~Tensor();

  // Uninitialized, zero-filled, constant-filled and copied-from-host tensors.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  static Tensor from_vector(const Shape& shape, std::span<const float> values);
  static Tensor from_vector(const Shape& shape, std::span<const int32_t> values);
  // A host tensor over memory it does not own (a received network frame): `owner` keeps the
  // shape.numel() elements at `data` alive and is let go when the last view of them is.
  static Tensor adopt(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim(int i) const;  // negative i counts from the end
  int rank() const { return shape().rank(); }
  int64_t numel() const { return shape().numel(); }
  DType dtype() const;
  Device device() const;
  const int64_t* strides() const;
  bool is_contiguous() const;
  uint64_t id() const;  // unique for the life of the process; used by the tape

  // The first element on the host. A tensor on a device the host cannot read directly fails
  // here: read it through to(Device::cpu()), to_vector() or item(), the one path to the host.
  template <typename T>
  T* data();
  void* raw();  // the first element's bytes, whatever the dtype (host, as data)
  const void* raw() const;
  template <typename T>
  const T* data() const;
  // The first element's address on the tensor's own device, unchecked: for that device's kernels.
  template <typename T>
  T* buffer() const;
  std::vector<float> to_vector() const;  // float32 copy on the host, any layout
  float item() const;                    // a one-element float32 tensor's value, on the host
  Tensor to(Device device) const;        // a contiguous copy on `device` (itself when already there)

  // Views (share storage).
  Tensor reshape(const Shape& shape) const;          // -1 allowed once; needs a contiguous tensor
  Tensor slice(int64_t begin, int64_t end) const;    // rows [begin, end) of dimension 0
  Tensor row(int64_t i) const;                       // row i of dimension 0, without that axis
  Tensor columns(int64_t begin, int64_t end) const;  // [begin, end) of the last dimension
  Tensor contiguous() const;                         // itself when already contiguous
  Tensor clone() const;                              // a contiguous deep copy
  Tensor astype(DType dtype) const;                  // converting copy
  void copy_from(const Tensor& src);                 // same shape and dtype; any strides
  void fill(float value);

  TensorImpl* impl() const { return impl_; }
  explicit Tensor(TensorImpl* impl) : impl_(impl) {}  // takes one reference

 private:
  TensorImpl* impl_ = nullptr;
};

std::string to_string(const Tensor& t);  // shape and dtype, for messages

}  // namespace tandem
