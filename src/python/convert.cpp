// numpy <-> Tensor and the conversions of Python arguments the binding's files share.
#include "python/binding.h"

#include <fmt/format.h>

namespace tandem::python {

namespace {

std::optional<DType> dtype_of_array(const py::array& a) {
  if (a.dtype().is(py::dtype::of<float>())) return DType::Float32;
  if (a.dtype().is(py::dtype::of<int32_t>())) return DType::Int32;
  if (a.dtype().is(py::dtype::of<uint8_t>())) return DType::UInt8;
  return std::nullopt;
}

}  // namespace

Tensor from_numpy(const py::array& a, const char* what) {
  std::optional<DType> dtype = dtype_of_array(a);
  if (!dtype)
    throw Error(
        fmt::format("{}: expected a float32, int32 or uint8 array, got {}", what, std::string(py::str(a.dtype()))));
  if (!(a.flags() & py::array::c_style))
    throw Error(fmt::format("{}: expected a C-contiguous array (np.ascontiguousarray)", what));
  if (a.ndim() > Shape::kMaxRank)
    throw Error(fmt::format("{}: arrays of up to {} dimensions, got {}", what, Shape::kMaxRank, a.ndim()));
  Shape shape;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(a.shape(i));
  PyObject* owner = a.ptr();
  Py_INCREF(owner);
  std::shared_ptr<void> keep(owner, [](void* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(p));
  });
  return Tensor::adopt(const_cast<void*>(a.data()), shape, *dtype, std::move(keep));
}

py::array to_numpy(const Tensor& t) {
  if (!t.defined()) return py::none();
  Tensor host = t.to(Device::cpu()).contiguous();
  std::vector<py::ssize_t> shape;
  for (int i = 0; i < host.rank(); ++i) shape.push_back(host.dim(i));
  auto* keep = new Tensor(host);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  switch (host.dtype()) {
    case DType::Float32: return py::array_t<float>(shape, keep->data<float>(), owner);
    case DType::Int32: return py::array_t<int32_t>(shape, keep->data<int32_t>(), owner);
    case DType::UInt8: return py::array_t<uint8_t>(shape, keep->data<uint8_t>(), owner);
  }
  return py::none();
}

Tensor tensor_from(const py::object& o, const char* what) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  if (py::isinstance<py::array>(o)) return from_numpy(o.cast<py::array>(), what);
  throw Error(fmt::format("{}: expected a numpy array or a tandem Tensor, got {}", what, std::string(py::repr(o))));
}

py::dict logs_dict(const Logs& logs) {
  py::dict d;
  for (const auto& [name, value] : logs) d[py::str(name)] = value;
  return d;
}

std::optional<Shape> shape_of(const std::optional<std::vector<int64_t>>& dims) {
  if (!dims) return std::nullopt;
  return Shape(std::span<const int64_t>(dims->data(), dims->size()));
}

MonitorMode monitor_mode(const std::string& mode) {
  if (mode == "auto") return MonitorMode::Auto;
  if (mode == "min") return MonitorMode::Min;
  if (mode == "max") return MonitorMode::Max;
  throw Error(fmt::format("mode must be \"auto\", \"min\" or \"max\", got \"{}\"", mode));
}

py::dict history_dict(const History& h) {
  py::dict d;
  for (const auto& [name, values] : h.history) d[py::str(name)] = py::cast(values);
  return d;
}

std::vector<Tensor> tensors_from(const py::list& list, const char* what) {
  std::vector<Tensor> out;
  for (const py::handle& h : list) out.push_back(tensor_from(py::reinterpret_borrow<py::object>(h), what));
  return out;
}

}  // namespace tandem::python
