// tandem._tandem's exceptions, Tensor and GradientTape.
#include "python/binding.h"

#include <cerrno>
#include <optional>

#include "tandem/data/idx.h"
#include "tandem/runtime.h"

namespace tandem::python {
namespace {

// A tape as tf.GradientTape's `with` block uses it: recording on the thread that entered it until
// the block ends, its gradient taken once after (non-persistent) or many times (persistent).
struct TapeHandle {
  bool persistent = false;
  std::unique_ptr<GradientTape> tape;
  bool used = false;
};

// The other operand of a tensor's operator: a number (`scalar` set), or an array or tensor as a
// float32 tensor on `like`'s device.
struct Operand {
  std::optional<float> scalar;
  Tensor tensor;
};
Operand operand_of(const Tensor& like, const py::object& o, const char* op) {
  if (py::isinstance<py::bool_>(o)) throw Error(fmt::format("tandem.Tensor {}: a bool is not a number here", op));
  if (py::isinstance<py::float_>(o) || py::isinstance<py::int_>(o)) return {o.cast<float>(), Tensor()};
  if (!py::isinstance<Tensor>(o) && !py::isinstance<py::array>(o))
    throw Error(fmt::format("tandem.Tensor {}: expected a number, a numpy array or a tandem Tensor, got {}", op,
                            std::string(py::repr(py::type::of(o)))));
  Tensor t = tensor_from(o, op);
  if (t.dtype() != DType::Float32) t = t.astype(DType::Float32);
  return {std::nullopt, t.to(like.device())};
}
Tensor full_like(const Tensor& t, float value) { return Tensor::full(t.shape(), value, t.device()); }

// a + b, a - b (sign -1) with a number or a tensor of a's shape or of its last axis; either side.
Tensor add(const Tensor& a, const py::object& o, float sign, const char* op) {
  Operand b = operand_of(a, o, op);
  if (b.scalar) return ops::add(a, full_like(a, sign * *b.scalar));
  return sign > 0 ? ops::add(a, b.tensor) : ops::sub(a, b.tensor);
}

Tensor plus(const Tensor& a, const py::object& b) { return add(a, b, 1.0f, "+"); }
Tensor times(const Tensor& a, const py::object& b) {
  Operand o = operand_of(a, b, "*");
  return o.scalar ? ops::scale(a, *o.scalar) : ops::mul(a, o.tensor);
}

}  // namespace

void register_errors(py::module_& m) {
  // The exception classes are the package's (tandem/errors.py): Error(ValueError), FileError
  // (OSError, Error) and FileNotFoundError.
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const FileError& e) {
      py::module_ errors = py::module_::import("tandem.errors");
      const char* cls = e.error_number() == ENOENT ? "FileNotFoundError" : "FileError";
      py::object err = errors.attr(cls)(e.error_number(), e.what());
      PyErr_SetObject(errors.attr(cls).ptr(), err.ptr());
    } catch (const Error& e) {
      PyErr_SetString(py::module_::import("tandem.errors").attr("Error").ptr(), e.what());
    }
  });
}

void register_tensors(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", "A tensor of the engine (tandem.keras' model(x), losses and gradients)")
      .def(
          "numpy", [](const Tensor& t) { return to_numpy(t); }, "The values as a numpy array")
      .def_property_readonly("shape",
                             [](const Tensor& t) {
                               std::vector<int64_t> s(t.shape().begin(), t.shape().end());
                               return py::tuple(py::cast(s));
                             })
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      // A TensorFlow tensor's operators, recorded on the tape (differentiable): + - * with numbers,
      // arrays or tensors of the same shape (or of the last axis), / by a number, unary minus, @.
      // Comparisons, indexing and len() read the values (numpy's results, not recorded).
      .def("__add__", &plus)
      .def("__radd__", &plus)
      .def("__sub__", [](const Tensor& a, const py::object& b) { return add(a, b, -1.0f, "-"); })
      .def("__rsub__",
           [](const Tensor& a, const py::object& b) {
             Operand o = operand_of(a, b, "-");
             return o.scalar ? ops::add(ops::scale(a, -1.0f), full_like(a, *o.scalar)) : ops::sub(o.tensor, a);
           })
      .def("__mul__", &times)
      .def("__rmul__", &times)
      .def("__truediv__",
           [](const Tensor& a, const py::object& b) {
             Operand o = operand_of(a, b, "/");
             if (!o.scalar)
               throw Error(
                   "tandem.Tensor /: division by a tensor is not built; divide by a number, or multiply by "
                   "a reciprocal computed in numpy");
             if (*o.scalar == 0.0f) throw Error("tandem.Tensor /: division by zero");
             return ops::scale(a, 1.0f / *o.scalar);
           })
      .def("__rtruediv__",
           [](const Tensor&, const py::object&) -> Tensor {
             throw Error(
                 "tandem.Tensor /: division by a tensor is not built; multiply by a reciprocal computed "
                 "in numpy");
           })
      .def("__neg__", [](const Tensor& a) { return ops::scale(a, -1.0f); })
      .def("__matmul__",
           [](const Tensor& a, const py::object& b) {
             Operand o = operand_of(a, b, "@");
             if (o.scalar) throw Error("tandem.Tensor @: the other operand is a number, not a matrix");
             return ops::matmul(a, o.tensor);
           })
      .def("__rmatmul__",
           [](const Tensor& a, const py::object& b) {
             Operand o = operand_of(a, b, "@");
             if (o.scalar) throw Error("tandem.Tensor @: the other operand is a number, not a matrix");
             return ops::matmul(o.tensor, a);
           })
      .def(
          "__array__", [](const Tensor& t, const py::object&) { return to_numpy(t); }, py::arg("dtype") = py::none())
      .def("__len__",
           [](const Tensor& t) {
             if (t.rank() == 0) throw Error("len(): the tensor is a scalar");
             return t.dim(0);
           })
      .def("__getitem__", [](const Tensor& t, const py::object& key) { return to_numpy(t).attr("__getitem__")(key); })
      .def("__float__",
           [](const Tensor& t) {
             if (t.numel() != 1)
               throw Error(fmt::format("float(): the tensor has shape {}, not one value", t.shape().str()));
             return static_cast<double>(t.astype(DType::Float32).item());
           })
      .def("__repr__", [](const Tensor& t) {
        return fmt::format("<tandem.Tensor shape={} dtype={}>", t.shape().str(), dtype_name(t.dtype()));
      });
  for (const char* op : {"__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"})
    m.attr("Tensor").attr(op) = py::cpp_function(
        [op](const Tensor& a, const py::object& b) {
          return to_numpy(a).attr(op)(py::isinstance<Tensor>(b) ? to_numpy(b.cast<Tensor>()) : b);
        },
        py::is_method(m.attr("Tensor")));
  m.def("as_tensor", [](const py::object& o) { return tensor_from(o, "as_tensor"); });
  py::class_<Variable>(m, "Variable", "A model's variable (model.trainable_variables)")
      .def_property_readonly("name", [](const Variable& v) { return v.name; })
      .def_property_readonly("trainable", [](const Variable& v) { return v.trainable; })
      .def_property_readonly("shape",
                             [](const Variable& v) {
                               std::vector<int64_t> s(v.value.shape().begin(), v.value.shape().end());
                               return py::tuple(py::cast(s));
                             })
      .def("numpy", [](const Variable& v) { return to_numpy(v.value.clone()); })
      .def("__repr__",
           [](const Variable& v) { return fmt::format("<tandem.Variable '{}' {}>", v.name, v.value.shape().str()); });
  py::class_<TapeHandle, std::shared_ptr<TapeHandle>>(m, "GradientTape")
      .def(py::init([](bool persistent) {
             auto h = std::make_shared<TapeHandle>();
             h->persistent = persistent;
             return h;
           }),
           py::arg("persistent"))
      .def("enter",
           [](TapeHandle& h) {
             if (h.tape) throw Error("GradientTape: this tape was entered already; make a new one for each step");
             h.tape = std::make_unique<GradientTape>(h.persistent);
           })
      .def("exit",
           [](TapeHandle& h) {
             if (h.tape) h.tape->end_recording();
           })
      .def("watch",
           [](TapeHandle& h, const Tensor& t) {
             if (!h.tape) throw Error("GradientTape.watch: use it inside the tape's `with` block");
             h.tape->watch(t);
           })
      .def("gradient", [](TapeHandle& h, const Tensor& target, const py::list& sources, const py::object& seed) {
        if (!h.tape) throw Error("GradientTape.gradient: the tape recorded nothing (use it in a `with` block)");
        if (h.used && !h.persistent)
          throw Error(
              "GradientTape.gradient: a non-persistent tape gives its gradients once (GradientTape(persistent=True) "
              "for more)");
        h.used = true;
        std::vector<Variable*> variables;
        std::vector<Tensor> tensors;
        for (const py::handle& s : sources) {
          if (py::isinstance<Variable>(s)) variables.push_back(s.cast<Variable*>());
          else tensors.push_back(tensor_from(py::reinterpret_borrow<py::object>(s), "GradientTape.gradient"));
        }
        if (!variables.empty() && !tensors.empty())
          throw Error("GradientTape.gradient: sources must be all variables or all tensors");
        std::optional<Tensor> output_gradient;
        if (!seed.is_none()) output_gradient = tensor_from(seed, "GradientTape.gradient: output_gradients");
        for (Variable* v : variables) tensors.push_back(v->value);
        std::vector<Tensor> grads;
        {
          py::gil_scoped_release nogil;  // the gradients may be summed over replicas as they are made
          if (output_gradient) grads = h.tape->gradient(target, tensors, *output_gradient);
          else if (variables.empty()) grads = h.tape->gradient(target, tensors);
          else grads = h.tape->gradient(target, variables);
        }
        return grads;
      });
  m.def(
      "compute_average_loss",
      [](const py::object& per_sample, int64_t global_batch_size) {
        Tensor t = tensor_from(per_sample, "compute_average_loss");
        py::gil_scoped_release nogil;
        return compute_average_loss(t, global_batch_size);
      },
      py::arg("per_example_loss"), py::arg("global_batch_size"));
  m.def("reduce_mean", [](const Tensor& t) {
    py::gil_scoped_release nogil;
    return ops::mean(t);
  });
  m.def("reduce_sum", [](const Tensor& t) {
    py::gil_scoped_release nogil;
    return ops::sum(t);
  });
  m.def(
      "roundtrip", [](const py::array& a) { return to_numpy(from_numpy(a, "roundtrip")); },
      "The array through a tensor and back (tests: the tensor reads the array's memory).");
  m.def(
      "tensor_address", [](const py::array& a) { return reinterpret_cast<uintptr_t>(from_numpy(a, "x").raw()); },
      "Where a tensor made from the array reads its data (tests: the same address as the array's).");
  m.def(
      "read_idx", [](const std::string& path) { return to_numpy(data::read_idx(path)); },
      "An IDX file (MNIST's format, plain or gzip) as a uint8 array.");
  m.def("dataset_search_path", &data::dataset_search_path, py::arg("data_dir") = "");
  m.def("set_num_threads", &set_num_threads);
  m.def("num_threads", &num_threads);
  m.def("cpu_isa", &cpu_isa, "The vector level Tandem's kernels run at (TANDEM_MAX_ISA caps it).");
}

}  // namespace tandem::python
