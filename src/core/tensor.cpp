// Tensor: its storage (shared, reference-counted, on a device), views, copies between devices and
// dtypes. The value types it is made of (DType, Device, Shape) are in shape.cpp.
#include "tandem/tensor.h"

#include <cstring>
#include <limits>
#include <type_traits>

#include "core/device_memory.h"
#include "core/tensor_impl.h"
#include "tandem/devices.h"

namespace tandem {
namespace {

std::atomic<uint64_t> next_tensor_id{1};

std::array<core::DeviceMemory*, 3> device_memories{};

void storage_release(Storage* s) {
  if (s != nullptr && s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (s->owner) s->owner.reset();
    else if (s->device.kind == Device::Kind::CPU) {
      memory::deallocate(s->data, s->bytes);
      if (s->charged) core::refund_cpu_device(s->device, s->bytes);
    } else core::device_memory(s->device.kind)->deallocate(s->device, s->data, s->bytes);
    delete s;
  }
}

// Whether host code may touch the tensor's bytes directly.
bool on_host(const TensorImpl* impl) {
  return impl->device.kind == Device::Kind::CPU || core::device_memory(impl->device.kind)->host_accessible();
}

void contiguous_strides(TensorImpl* impl) {
  int64_t stride = 1;
  for (int i = impl->shape.rank() - 1; i >= 0; --i) {
    impl->strides[static_cast<size_t>(i)] = stride;
    stride *= impl->shape[i];
  }
}

TensorImpl* make_view(const TensorImpl* base, const Shape& shape, int64_t offset) {
  auto* impl = new TensorImpl();
  impl->storage = base->storage;
  base->storage->refs.fetch_add(1, std::memory_order_relaxed);
  impl->shape = shape;
  impl->offset = offset;
  impl->dtype = base->dtype;
  impl->device = base->device;
  impl->id = next_tensor_id.fetch_add(1, std::memory_order_relaxed);
  contiguous_strides(impl);
  return impl;
}

template <typename Fn>
void for_each_offset(const TensorImpl* impl, Fn&& fn) {
  // Visits element offsets of a strided tensor in row-major order.
  const Shape& s = impl->shape;
  int64_t n = s.numel();
  if (n == 0) return;
  std::array<int64_t, Shape::kMaxRank> index{};
  int64_t off = impl->offset;
  for (int64_t k = 0; k < n; ++k) {
    fn(k, off);
    for (int d = s.rank() - 1; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      if (++index[du] < s[d]) {
        off += impl->strides[du];
        break;
      }
      off -= impl->strides[du] * (s[d] - 1);
      index[du] = 0;
    }
  }
}

}  // namespace

namespace core {
void register_device_memory(Device::Kind kind, DeviceMemory* memory) {
  if (kind == Device::Kind::CPU) fail("register_device_memory: the cpu's memory is the pooled allocator");
  device_memories[static_cast<size_t>(kind)] = memory;
}
DeviceMemory* device_memory(Device::Kind kind) { return device_memories[static_cast<size_t>(kind)]; }
}  // namespace core

Tensor::Tensor(const Tensor& o) : impl_(o.impl_) {
  if (impl_) impl_->refs.fetch_add(1, std::memory_order_relaxed);
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (o.impl_) o.impl_->refs.fetch_add(1, std::memory_order_relaxed);
  Tensor old(impl_);
  impl_ = o.impl_;
  return *this;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    Tensor old(impl_);
    impl_ = o.impl_;
    o.impl_ = nullptr;
  }
  return *this;
}

Tensor::~Tensor() {
  if (impl_ != nullptr && impl_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    storage_release(impl_->storage);
    delete impl_;
  }
}

Tensor Tensor::adopt(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner) {
  if (data == nullptr && shape.numel() > 0) fail("Tensor::adopt: no memory for a tensor of shape {}", shape.str());
  if (!owner) fail("Tensor::adopt: no owner keeps the memory alive");
  auto* storage = new Storage();
  storage->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  storage->data = data;
  storage->device = Device::cpu();
  storage->owner = std::move(owner);
  auto* impl = new TensorImpl();
  impl->storage = storage;
  impl->shape = shape;
  impl->dtype = dtype;
  impl->device = Device::cpu();
  impl->id = next_tensor_id.fetch_add(1, std::memory_order_relaxed);
  contiguous_strides(impl);
  return Tensor(impl);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  core::DeviceMemory* memory = nullptr;
  if (device.kind != Device::Kind::CPU) {
    check_device(device, "Tensor::empty");  // its memory is registered
    memory = core::device_memory(device.kind);
  }
  size_t bytes = std::max<size_t>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), 1);
  bool charged = device.kind == Device::Kind::CPU && core::charge_cpu_device(device, bytes);
  auto* storage = new Storage();
  storage->bytes = bytes;
  storage->charged = charged;
  try {
    storage->data = memory == nullptr ? memory::allocate(bytes) : memory->allocate(device, bytes);
  } catch (...) {
    if (charged) core::refund_cpu_device(device, bytes);
    delete storage;
    throw;
  }
  storage->device = device;
  auto* impl = new TensorImpl();
  impl->storage = storage;
  impl->shape = shape;
  impl->dtype = dtype;
  impl->device = device;
  impl->id = next_tensor_id.fetch_add(1, std::memory_order_relaxed);
  contiguous_strides(impl);
  return Tensor(impl);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  char zero = 0;
  if (on_host(t.impl_)) std::memset(t.impl_->storage->data, 0, bytes);
  else if (bytes > 0) core::device_memory(device.kind)->fill(device, t.impl_->storage->data, &zero, 1, bytes);  // on it
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, DType::Float32, device);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    fail("Tensor::from_vector: shape {} holds {} values, got {}", shape.str(), shape.numel(), values.size());
  Tensor t = empty(shape);
  if (!values.empty()) std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, std::span<const int32_t> values) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    fail("Tensor::from_vector: shape {} holds {} values, got {}", shape.str(), shape.numel(), values.size());
  Tensor t = empty(shape, DType::Int32);
  if (!values.empty()) std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

static const TensorImpl* checked(const TensorImpl* impl) {
  if (impl == nullptr) fail("Tensor: used before it was given a value");
  return impl;
}

const Shape& Tensor::shape() const { return checked(impl_)->shape; }
DType Tensor::dtype() const { return checked(impl_)->dtype; }
Device Tensor::device() const { return checked(impl_)->device; }
const int64_t* Tensor::strides() const { return checked(impl_)->strides.data(); }
uint64_t Tensor::id() const { return checked(impl_)->id; }

int64_t Tensor::dim(int i) const {
  const Shape& s = shape();
  int j = i < 0 ? i + s.rank() : i;
  if (j < 0 || j >= s.rank()) fail("Tensor::dim: index {} out of range for shape {}", i, s.str());
  return s[j];
}

bool Tensor::is_contiguous() const {
  const TensorImpl* impl = checked(impl_);
  int64_t stride = 1;
  for (int i = impl->shape.rank() - 1; i >= 0; --i) {
    if (impl->shape[i] != 1 && impl->strides[static_cast<size_t>(i)] != stride) return false;
    stride *= impl->shape[i];
  }
  return true;
}

template <typename T>
T* Tensor::data() {
  const TensorImpl* impl = checked(impl_);
  if (impl->dtype != dtype_of<T>())
    fail("Tensor::data: tensor is {}, requested {}", dtype_name(impl->dtype), dtype_name(dtype_of<T>()));
  if (impl->device.kind != Device::Kind::CPU && !on_host(impl))
    fail(
        "Tensor::data: the {} tensor lives on {}, which the host cannot read directly; read it with "
        "to(Device::cpu()), to_vector() or item()",
        to_string(*this), impl->device.name());
  return static_cast<T*>(impl->storage->data) + impl->offset;
}
template <typename T>
T* Tensor::buffer() const {
  const TensorImpl* impl = checked(impl_);
  if (impl->dtype != dtype_of<T>())
    fail("Tensor::buffer: tensor is {}, requested {}", dtype_name(impl->dtype), dtype_name(dtype_of<T>()));
  return static_cast<T*>(impl->storage->data) + impl->offset;
}
template <typename T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}
void* Tensor::raw() {
  const TensorImpl* impl = checked(impl_);
  if (!on_host(impl))
    fail("Tensor::raw: the {} tensor lives on {}; read it with to(Device::cpu())", to_string(*this),
         impl->device.name());
  return static_cast<char*>(impl->storage->data) + impl->offset * static_cast<int64_t>(dtype_size(impl->dtype));
}
const void* Tensor::raw() const { return const_cast<Tensor*>(this)->raw(); }

template float* Tensor::data<float>();
template int32_t* Tensor::data<int32_t>();
template uint8_t* Tensor::data<uint8_t>();
template const float* Tensor::data<float>() const;
template const int32_t* Tensor::data<int32_t>() const;
template const uint8_t* Tensor::data<uint8_t>() const;
template float* Tensor::buffer<float>() const;
template int32_t* Tensor::buffer<int32_t>() const;
template uint8_t* Tensor::buffer<uint8_t>() const;

// Through the host when either side is a device the host cannot read: the source's storage
// comes to the host whole (a view keeps its strides), the copy goes out contiguous.
Tensor Tensor::to(Device device) const {
  const TensorImpl* impl = checked(impl_);
  if (impl->device == device) return *this;
  if (!on_host(impl) && device.kind == impl->device.kind && is_contiguous()) {  // a device of the kind to another
    Tensor out = empty(impl->shape, impl->dtype, device);
    out.copy_from(*this);
    return out;
  }
  Tensor host = *this;  // readable on the host
  if (!on_host(impl)) {
    Tensor whole = empty(Shape{static_cast<int64_t>(impl->storage->bytes)}, DType::UInt8);
    core::device_memory(impl->device.kind)
        ->to_host(impl->device, whole.raw(), impl->storage->data, impl->storage->bytes);
    auto* view = new TensorImpl();
    view->storage = whole.impl_->storage;
    view->storage->refs.fetch_add(1, std::memory_order_relaxed);
    view->shape = impl->shape;
    view->strides = impl->strides;
    view->offset = impl->offset;
    view->dtype = impl->dtype;
    view->id = next_tensor_id.fetch_add(1, std::memory_order_relaxed);
    host = Tensor(view);
  }
  if (device == host.device()) return host.contiguous();
  Tensor out = empty(impl->shape, impl->dtype, device);
  if (on_host(out.impl_)) {
    out.copy_from(host);
    return out;
  }
  Tensor c = host.contiguous();
  size_t bytes = static_cast<size_t>(out.numel()) * dtype_size(out.dtype());
  core::device_memory(device.kind)->from_host(device, out.impl_->storage->data, c.raw(), bytes);
  return out;
}

std::vector<float> Tensor::to_vector() const {
  if (!on_host(checked(impl_))) return to(Device::cpu()).to_vector();
  Tensor f = dtype() == DType::Float32 ? contiguous() : astype(DType::Float32);
  const float* p = f.data<float>();
  return std::vector<float>(p, p + f.numel());
}

float Tensor::item() const {
  if (numel() != 1) fail("Tensor::item: tensor has shape {}, expected one element", shape().str());
  if (!on_host(impl_)) return to(Device::cpu()).item();
  if (dtype() == DType::Float32) return *data<float>();
  return to_vector()[0];
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  const TensorImpl* impl = checked(impl_);
  if (!is_contiguous()) return contiguous().reshape(new_shape);
  if (new_shape.numel() != impl->shape.numel())
    fail("reshape: cannot view shape {} ({} elements) as {} ({} elements)", impl->shape.str(), impl->shape.numel(),
         new_shape.str(), new_shape.numel());
  return Tensor(make_view(impl, new_shape, impl->offset));
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  const TensorImpl* impl = checked(impl_);
  if (impl->shape.rank() == 0) fail("slice: tensor is a scalar");
  int64_t rows = impl->shape[0];
  if (begin < 0 || end < begin || end > rows)
    fail("slice: rows [{}, {}) out of range for dimension 0 of size {}", begin, end, rows);
  Shape s = impl->shape;
  s[0] = end - begin;
  auto* view = make_view(impl, s, impl->offset + begin * impl->strides[0]);
  view->strides = impl->strides;
  return Tensor(view);
}

Tensor Tensor::columns(int64_t begin, int64_t end) const {
  const TensorImpl* impl = checked(impl_);
  int last = impl->shape.rank() - 1;
  if (last < 0) fail("columns: tensor is a scalar");
  int64_t size = impl->shape[last];
  if (begin < 0 || end < begin || end > size)
    fail("columns: [{}, {}) out of range for the last dimension of size {}", begin, end, size);
  Shape s = impl->shape;
  s[last] = end - begin;
  auto* view = make_view(impl, s, impl->offset + begin * impl->strides[static_cast<size_t>(last)]);
  view->strides = impl->strides;
  return Tensor(view);
}

Tensor Tensor::row(int64_t i) const {
  const TensorImpl* impl = checked(impl_);
  if (impl->shape.rank() == 0) fail("row: tensor is a scalar");
  if (i < 0 || i >= impl->shape[0]) fail("row: index {} out of range for dimension 0 of size {}", i, impl->shape[0]);
  Shape s(std::span<const int64_t>(impl->shape.begin() + 1, impl->shape.end()));
  auto* view = make_view(impl, s, impl->offset + i * impl->strides[0]);
  for (int d = 1; d < impl->shape.rank(); ++d)
    view->strides[static_cast<size_t>(d - 1)] = impl->strides[static_cast<size_t>(d)];
  return Tensor(view);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  const TensorImpl* impl = checked(impl_);
  if (!on_host(impl) && !is_contiguous()) return to(Device::cpu()).to(impl->device);
  Tensor out = empty(impl->shape, impl->dtype, impl->device);  // a device's: copied on it
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  TensorImpl* d = impl_;
  const TensorImpl* s = checked(src.impl_);
  checked(d);
  if (!(d->shape == s->shape) || d->dtype != s->dtype)
    fail("copy_from: destination is {} {}, source is {} {}", d->shape.str(), dtype_name(d->dtype), s->shape.str(),
         dtype_name(s->dtype));
  size_t elem = dtype_size(d->dtype);
  if (!on_host(d) && !on_host(s) && d->device.kind == s->device.kind && is_contiguous() && src.is_contiguous()) {
    if (numel() > 0)  // within the kind's memory, without the host
      core::device_memory(d->device.kind)
          ->copy_within(d->device, static_cast<char*>(d->storage->data) + d->offset * static_cast<int64_t>(elem),
                        s->device, static_cast<const char*>(s->storage->data) + s->offset * static_cast<int64_t>(elem),
                        static_cast<size_t>(numel()) * elem);
    return;
  }
  if (!on_host(d) || !on_host(s)) {  // through the host; a device destination must be contiguous
    Tensor host = src.to(Device::cpu());
    if (on_host(d)) return copy_from(host);
    if (!is_contiguous()) fail("copy_from: the destination on {} must be contiguous", d->device.name());
    size_t bytes = static_cast<size_t>(numel()) * dtype_size(d->dtype);
    if (bytes > 0)
      core::device_memory(d->device.kind)
          ->from_host(d->device,
                      static_cast<char*>(d->storage->data) + d->offset * static_cast<int64_t>(dtype_size(d->dtype)),
                      host.raw(), bytes);
    return;
  }
  auto* dst = static_cast<char*>(d->storage->data);
  const auto* from = static_cast<const char*>(s->storage->data);
  if (is_contiguous() && src.is_contiguous()) {
    std::memmove(dst + d->offset * elem, from + s->offset * elem, static_cast<size_t>(numel()) * elem);
    return;
  }
  std::vector<int64_t> dst_offsets;
  dst_offsets.reserve(static_cast<size_t>(numel()));
  for_each_offset(d, [&](int64_t, int64_t off) { dst_offsets.push_back(off); });
  for_each_offset(s, [&](int64_t k, int64_t off) {
    std::memcpy(dst + dst_offsets[static_cast<size_t>(k)] * elem, from + off * elem, elem);
  });
}

void Tensor::fill(float value) {
  if (dtype() != DType::Float32 || !is_contiguous())
    fail("fill: needs a contiguous float32 tensor, got {}", to_string(*this));
  if (!on_host(impl_)) {  // on the device itself
    if (numel() > 0)
      core::device_memory(device().kind)
          ->fill(device(), static_cast<float*>(impl_->storage->data) + impl_->offset, &value, sizeof value,
                 static_cast<size_t>(numel()));
    return;
  }
  float* p = data<float>();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

Tensor Tensor::astype(DType dtype) const {
  if (!on_host(checked(impl_))) return to(Device::cpu()).astype(dtype).to(device());
  Tensor src = contiguous();
  Tensor out = empty(src.shape(), dtype, src.device());
  int64_t n = src.numel();
  auto convert = [&](auto* dst) {
    using D = std::remove_pointer_t<decltype(dst)>;
    switch (src.dtype()) {
      case DType::Float32: {
        const float* p = src.data<float>();
        if constexpr (!std::is_same_v<D, float>) {  // a NaN or a value past D's range: undefined behaviour
          constexpr double below = static_cast<double>(std::numeric_limits<D>::min()) - 1.0;
          constexpr double past = static_cast<double>(std::numeric_limits<D>::max()) + 1.0;
          for (int64_t i = 0; i < n; ++i)
            if (!(static_cast<double>(p[i]) > below && static_cast<double>(p[i]) < past))
              fail("astype({}): element {} is {}, outside {}'s range", dtype_name(dtype), i, p[i], dtype_name(dtype));
        }
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
        break;
      }
      case DType::Int32: {
        const int32_t* p = src.data<int32_t>();
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
        break;
      }
      case DType::UInt8: {
        const uint8_t* p = src.data<uint8_t>();
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
        break;
      }
    }
  };
  switch (dtype) {
    case DType::Float32: convert(out.data<float>()); break;
    case DType::Int32: convert(out.data<int32_t>()); break;
    case DType::UInt8: convert(out.data<uint8_t>()); break;
  }
  return out;
}

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "<undefined tensor>";
  return fmt::format("{} {}", dtype_name(t.dtype()), t.shape().str());
}

}  // namespace tandem
