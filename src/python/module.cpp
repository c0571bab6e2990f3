// tandem._tandem: the C++ engine as Python sees it. The Keras-shaped surface (argument names,
// defaults, docstrings) is the Python package's (python/tandem); this module gives it tensors
// over numpy without copies, the model, layers, optimizers, losses, callbacks and strategies, and
// turns tandem::Error into Python exceptions. fit, evaluate and predict run without the GIL;
// whatever calls back into Python (a callback, the Ctrl-C check, freeing a numpy buffer) takes it.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "tandem/data/idx.h"
#include "tandem/devices.h"
#include "tandem/distribute/model_parallel.h"
#include "tandem/hvd.h"
#include "tandem/model.h"
#include "tandem/model_json.h"
#include "tandem/runtime.h"

namespace py = pybind11;

namespace tandem::python {
namespace {

// --- numpy ↔ Tensor ---

std::optional<DType> dtype_of_array(const py::array& a) {
  if (a.dtype().is(py::dtype::of<float>())) return DType::Float32;
  if (a.dtype().is(py::dtype::of<int32_t>())) return DType::Int32;
  if (a.dtype().is(py::dtype::of<uint8_t>())) return DType::UInt8;
  return std::nullopt;
}

// The array's memory as a tensor, without a copy: the tensor keeps the array alive (released
// under the GIL). The caller passes a C-contiguous float32, int32 or uint8 array (the package
// converts anything else once).
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

// The tensor as an array over its own memory (no copy when it lives on the host contiguous).
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

// A numpy array (used in place where it can be) or a tandem Tensor.
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

// --- callbacks ---

// A Python object's hooks (tandem.keras.callbacks.Callback or anything with its methods), called
// with the GIL; an exception it raises ends fit with that exception.
class PythonCallback : public Callback {
 public:
  explicit PythonCallback(py::object target) : target_(std::move(target)) {
    // Batch hooks cost a trip into Python per batch: only those the callback defines run.
    py::object base = py::module_::import("tandem.keras.callbacks").attr("Callback");
    py::object type = py::type::of(target_);
    auto overridden = [&](const char* name) { return !py::getattr(type, name).is(py::getattr(base, name)); };
    batch_begin_ = overridden("on_train_batch_begin") || overridden("on_batch_begin");
    batch_end_ = overridden("on_train_batch_end") || overridden("on_batch_end");
  }
  ~PythonCallback() override {
    py::gil_scoped_acquire gil;
    target_ = py::object();
  }
  void on_train_begin(const Logs& logs) override { call("on_train_begin", logs); }
  void on_train_end(const Logs& logs) override { call("on_train_end", logs); }
  void on_epoch_begin(int epoch, const Logs& logs) override { call("on_epoch_begin", epoch, logs); }
  void on_epoch_end(int epoch, const Logs& logs) override { call("on_epoch_end", epoch, logs); }
  void on_batch_begin(int64_t batch, const Logs& logs) override {
    if (batch_begin_) call("on_train_batch_begin", batch, logs);
  }
  void on_batch_end(int64_t batch, const Logs& logs) override {
    if (batch_end_) call("on_train_batch_end", batch, logs);
  }

 private:
  template <typename... Args>
  void call(const char* name, Args... args) {
    py::gil_scoped_acquire gil;
    target_.attr(name)(convert(args)...);
  }
  static py::object convert(int v) { return py::int_(v); }
  static py::object convert(int64_t v) { return py::int_(v); }
  static py::object convert(const Logs& logs) { return logs_dict(logs); }
  py::object target_;
  bool batch_begin_ = false, batch_end_ = false;
};

// Between batches: Python's pending signals (Ctrl-C raises KeyboardInterrupt here, after the batch
// that was running finished and was applied) and a model stopped from Python.
class InterruptCheck : public Callback {
 public:
  void on_batch_end(int64_t, const Logs&) override {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
};

// --- strategies ---

struct StrategyHandle {
  std::shared_ptr<distribute::Strategy> strategy;
  std::vector<std::unique_ptr<distribute::Strategy::Scope>> scopes;  // entered, innermost last
};

// --- the model ---

struct ModelHandle {
  std::shared_ptr<distribute::Strategy> strategy;  // kept alive while the model lives
  std::unique_ptr<Sequential> model;
  std::atomic<bool> busy{false};  // fit, evaluate or predict running (without the GIL)
  Sequential& get() {
    if (!model) throw Error("this model was freed");
    return *model;
  }
};

// One whole-model call at a time: another thread's fit, evaluate or predict on the same model (or
// freeing it meanwhile) is refused, not raced.
class Busy {
 public:
  Busy(ModelHandle& h, const char* what) : h_(h) {
    h.get();
    if (h.busy.exchange(true))
      throw Error(fmt::format("{}: this model is already training or predicting in another thread", what));
  }
  ~Busy() { h_.busy = false; }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  ModelHandle& h_;
};

std::unique_ptr<Optimizer> optimizer_from(const py::object& o) {
  if (py::isinstance<py::str>(o)) return optimizers::by_name(o.cast<std::string>());
  if (py::isinstance<Optimizer>(o)) return o.cast<Optimizer&>().clone();
  throw Error(fmt::format("compile: optimizer must be a name (\"adam\") or an optimizer object, got {}",
                          std::string(py::repr(o))));
}

Loss loss_from(const py::object& o) {
  if (py::isinstance<py::str>(o)) return Loss(o.cast<std::string>());
  if (py::isinstance<Loss>(o)) return o.cast<Loss>();
  throw Error(fmt::format("compile: loss must be a name (\"sparse_categorical_crossentropy\") or a loss object, got {}",
                          std::string(py::repr(o))));
}

std::vector<std::shared_ptr<Callback>> callbacks_from(const py::list& list) {
  std::vector<std::shared_ptr<Callback>> out;
  for (const py::handle& h : list) {
    if (py::isinstance<Callback>(h)) out.push_back(h.cast<std::shared_ptr<Callback>>());
    else out.push_back(std::make_shared<PythonCallback>(py::reinterpret_borrow<py::object>(h)));
  }
  out.push_back(std::make_shared<InterruptCheck>());
  return out;
}

py::dict history_dict(const History& h) {
  py::dict d;
  for (const auto& [name, values] : h.history) d[py::str(name)] = py::cast(values);
  return d;
}

// A tape as tf.GradientTape's `with` block uses it: recording on the thread that entered it until
// the block ends, its gradient taken once after (non-persistent) or many times (persistent).
struct TapeHandle {
  bool persistent = false;
  std::unique_ptr<GradientTape> tape;
  bool used = false;
};

std::vector<Tensor> tensors_from(const py::list& list, const char* what) {
  std::vector<Tensor> out;
  for (const py::handle& h : list) out.push_back(tensor_from(py::reinterpret_borrow<py::object>(h), what));
  return out;
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
      .def("__float__",
           [](const Tensor& t) {
             if (t.numel() != 1)
               throw Error(fmt::format("float(): the tensor has shape {}, not one value", t.shape().str()));
             return static_cast<double>(t.astype(DType::Float32).item());
           })
      .def("__repr__", [](const Tensor& t) {
        return fmt::format("<tandem.Tensor shape={} dtype={}>", t.shape().str(), dtype_name(t.dtype()));
      });
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
      .def("gradient", [](TapeHandle& h, const Tensor& target, const py::list& sources) {
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
        std::vector<Tensor> grads;
        {
          py::gil_scoped_release nogil;  // the gradients may be summed over replicas as they are made
          grads = variables.empty() ? h.tape->gradient(target, tensors) : h.tape->gradient(target, variables);
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
}

void register_layers(py::module_& m) {
  using namespace layers;
  py::class_<Layer, std::shared_ptr<Layer>>(m, "Layer")
      .def_property_readonly("name", &Layer::name)
      .def_property_readonly("type", &Layer::type)
      .def_property_readonly("built", &Layer::built)
      .def("count_params", &Layer::count_params)
      .def_property_readonly("output_shape",
                             [](const Layer& l) {
                               std::vector<int64_t> s(l.output_shape().begin(), l.output_shape().end());
                               return s;
                             })
      .def("get_weights",
           [](Layer& l) {
             py::list out;
             for (Variable& v : l.variables()) out.append(to_numpy(v.value.clone()));
             return out;
           })
      .def("__repr__", [](const Layer& l) { return "<tandem " + l.label() + ">"; });

  py::class_<Dense, Layer, std::shared_ptr<Dense>>(m, "Dense")
      .def(
          py::init([](int64_t units, std::string activation, bool use_bias, std::string kernel_initializer,
                      std::string bias_initializer, std::string name, std::optional<std::vector<int64_t>> input_shape) {
            if (units <= 0) throw Error(fmt::format("Dense: units must be positive, got {}", units));
            return std::make_shared<Dense>(units, activation,
                                           DenseOptions{.use_bias = use_bias,
                                                        .kernel_initializer = kernel_initializer,
                                                        .bias_initializer = bias_initializer,
                                                        .name = name,
                                                        .input_shape = shape_of(input_shape)});
          }),
          py::arg("units"), py::arg("activation"), py::arg("use_bias"), py::arg("kernel_initializer"),
          py::arg("bias_initializer"), py::arg("name"), py::arg("input_shape"));
  py::class_<Dropout, Layer, std::shared_ptr<Dropout>>(m, "Dropout")
      .def(py::init([](float rate, std::string name, std::optional<std::vector<int64_t>> input_shape) {
             return std::make_shared<Dropout>(rate, DropoutOptions{.name = name, .input_shape = shape_of(input_shape)});
           }),
           py::arg("rate"), py::arg("name"), py::arg("input_shape"));
  py::class_<Conv2D, Layer, std::shared_ptr<Conv2D>>(m, "Conv2D")
      .def(
          py::init([](int64_t filters, std::pair<int64_t, int64_t> kernel, std::pair<int64_t, int64_t> strides,
                      std::string padding, std::string activation, bool use_bias, std::string kernel_initializer,
                      std::string bias_initializer, std::string name, std::optional<std::vector<int64_t>> input_shape) {
            return std::make_shared<Conv2D>(filters, Size2(kernel.first, kernel.second),
                                            Conv2DOptions{.strides = Size2(strides.first, strides.second),
                                                          .padding = padding,
                                                          .activation = activation,
                                                          .use_bias = use_bias,
                                                          .kernel_initializer = kernel_initializer,
                                                          .bias_initializer = bias_initializer,
                                                          .name = name,
                                                          .input_shape = shape_of(input_shape)});
          }),
          py::arg("filters"), py::arg("kernel_size"), py::arg("strides"), py::arg("padding"), py::arg("activation"),
          py::arg("use_bias"), py::arg("kernel_initializer"), py::arg("bias_initializer"), py::arg("name"),
          py::arg("input_shape"));
  auto pooling = [](bool max, std::pair<int64_t, int64_t> pool, std::optional<std::pair<int64_t, int64_t>> strides,
                    std::string padding, std::string name,
                    std::optional<std::vector<int64_t>> input_shape) -> std::shared_ptr<Layer> {
    Pooling2DOptions o;
    o.padding = padding;
    o.name = name;
    o.input_shape = shape_of(input_shape);
    if (strides) o.strides = Size2(strides->first, strides->second);
    if (max) return std::make_shared<MaxPooling2D>(Size2(pool.first, pool.second), o);
    return std::make_shared<AveragePooling2D>(Size2(pool.first, pool.second), o);
  };
  m.def("Pooling2D", pooling, py::arg("max"), py::arg("pool_size"), py::arg("strides"), py::arg("padding"),
        py::arg("name"), py::arg("input_shape"));
  py::class_<Flatten, Layer, std::shared_ptr<Flatten>>(m, "Flatten")
      .def(py::init([](std::string name, std::optional<std::vector<int64_t>> input_shape) {
             return std::make_shared<Flatten>(FlattenOptions{.name = name, .input_shape = shape_of(input_shape)});
           }),
           py::arg("name"), py::arg("input_shape"));
  py::class_<BatchNormalization, Layer, std::shared_ptr<BatchNormalization>>(m, "BatchNormalization")
      .def(py::init([](float momentum, float epsilon, bool synchronized, std::string name,
                       std::optional<std::vector<int64_t>> input_shape) {
             return std::make_shared<BatchNormalization>(
                 BatchNormalizationOptions{.momentum = momentum,
                                           .epsilon = epsilon,
                                           .synchronized = synchronized,
                                           .name = name,
                                           .input_shape = shape_of(input_shape)});
           }),
           py::arg("momentum"), py::arg("epsilon"), py::arg("synchronized"), py::arg("name"), py::arg("input_shape"));
  py::class_<layers::Activation, Layer, std::shared_ptr<layers::Activation>>(m, "Activation")
      .def(py::init([](std::string activation, std::string name, std::optional<std::vector<int64_t>> input_shape) {
             return std::make_shared<layers::Activation>(
                 activation, ActivationOptions{.name = name, .input_shape = shape_of(input_shape)});
           }),
           py::arg("activation"), py::arg("name"), py::arg("input_shape"));
}

void register_training(py::module_& m) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def_property_readonly("name", &Optimizer::name)
      .def_property("learning_rate", &Optimizer::current_learning_rate,
                    py::overload_cast<float>(&Optimizer::set_learning_rate))
      .def_property_readonly("iterations", &Optimizer::iterations)
      .def("_apply", [](Optimizer& o, const py::list& grads, const py::list& vars) {
        if (grads.size() != vars.size())
          throw Error(fmt::format("apply_gradients: {} gradients for {} variables", grads.size(), vars.size()));
        std::vector<Variable*> variables;
        for (const py::handle& v : vars) {
          if (!py::isinstance<Variable>(v))
            throw Error(fmt::format("apply_gradients: expected model variables, got {}", std::string(py::repr(v))));
          variables.push_back(v.cast<Variable*>());
        }
        std::vector<Tensor> gradients = tensors_from(grads, "apply_gradients");
        py::gil_scoped_release nogil;  // the update may sum over replicas
        o.apply(variables, gradients);
      });
  py::class_<optimizers::SGD, Optimizer, std::shared_ptr<optimizers::SGD>>(m, "SGD").def(
      py::init([](float lr, float momentum, bool nesterov) {
        return std::make_shared<optimizers::SGD>(lr,
                                                 optimizers::SGDOptions{.momentum = momentum, .nesterov = nesterov});
      }),
      py::arg("learning_rate"), py::arg("momentum"), py::arg("nesterov"));
  py::class_<optimizers::Adam, Optimizer, std::shared_ptr<optimizers::Adam>>(m, "Adam").def(
      py::init([](float lr, float beta_1, float beta_2, float epsilon) {
        return std::make_shared<optimizers::Adam>(
            lr, optimizers::AdamOptions{.beta_1 = beta_1, .beta_2 = beta_2, .epsilon = epsilon});
      }),
      py::arg("learning_rate"), py::arg("beta_1"), py::arg("beta_2"), py::arg("epsilon"));
  py::class_<optimizers::RMSprop, Optimizer, std::shared_ptr<optimizers::RMSprop>>(m, "RMSprop")
      .def(py::init([](float lr, float rho, float momentum, float epsilon) {
             return std::make_shared<optimizers::RMSprop>(
                 lr, optimizers::RMSpropOptions{.rho = rho, .momentum = momentum, .epsilon = epsilon});
           }),
           py::arg("learning_rate"), py::arg("rho"), py::arg("momentum"), py::arg("epsilon"));
  py::class_<optimizers::Adagrad, Optimizer, std::shared_ptr<optimizers::Adagrad>>(m, "Adagrad")
      .def(py::init([](float lr, float initial_accumulator_value, float epsilon) {
             return std::make_shared<optimizers::Adagrad>(
                 lr, optimizers::AdagradOptions{.initial_accumulator_value = initial_accumulator_value,
                                                .epsilon = epsilon});
           }),
           py::arg("learning_rate"), py::arg("initial_accumulator_value"), py::arg("epsilon"));

  py::class_<Loss>(m, "Loss")
      .def(py::init([](const std::string& name, bool from_logits) {
             Loss named(name);
             return Loss(named.kind(), from_logits);
           }),
           py::arg("name"), py::arg("from_logits"))
      .def_property_readonly("name", &Loss::name)
      .def_property_readonly("from_logits", &Loss::from_logits)
      .def("per_sample", [](const Loss& loss, const py::object& y_true, const py::object& y_pred) {
        Tensor y = tensor_from(y_true, "loss: y_true"), p = tensor_from(y_pred, "loss: y_pred");
        py::gil_scoped_release nogil;
        return loss.per_sample(y, p);
      });

  py::class_<Callback, std::shared_ptr<Callback>>(m, "NativeCallback");
  py::class_<ModelCheckpoint, Callback, std::shared_ptr<ModelCheckpoint>>(m, "ModelCheckpoint")
      .def(py::init([](std::string filepath, std::string monitor, bool save_best_only, bool save_weights_only,
                       std::string mode, int64_t save_freq) {
             return std::make_shared<ModelCheckpoint>(filepath,
                                                      ModelCheckpointOptions{.monitor = monitor,
                                                                             .save_best_only = save_best_only,
                                                                             .save_weights_only = save_weights_only,
                                                                             .mode = monitor_mode(mode),
                                                                             .save_freq = save_freq});
           }),
           py::arg("filepath"), py::arg("monitor"), py::arg("save_best_only"), py::arg("save_weights_only"),
           py::arg("mode"), py::arg("save_freq"));
  py::class_<BackupAndRestore, Callback, std::shared_ptr<BackupAndRestore>>(m, "BackupAndRestore")
      .def(py::init([](std::string dir, int64_t save_freq, bool delete_checkpoint) {
             return std::make_shared<BackupAndRestore>(
                 dir, BackupAndRestoreOptions{.save_freq = save_freq, .delete_checkpoint = delete_checkpoint});
           }),
           py::arg("backup_dir"), py::arg("save_freq"), py::arg("delete_checkpoint"));
  py::class_<TensorBoard, Callback, std::shared_ptr<TensorBoard>>(m, "TensorBoard")
      .def(py::init([](std::string log_dir, int64_t update_freq) {
             return std::make_shared<TensorBoard>(log_dir, TensorBoardOptions{.update_freq = update_freq});
           }),
           py::arg("log_dir"), py::arg("update_freq"));
  py::class_<EarlyStopping, Callback, std::shared_ptr<EarlyStopping>>(m, "EarlyStopping")
      .def(py::init([](std::string monitor, double min_delta, int patience, std::string mode,
                       bool restore_best_weights) {
             return std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = monitor,
                                                                         .min_delta = min_delta,
                                                                         .patience = patience,
                                                                         .mode = monitor_mode(mode),
                                                                         .restore_best_weights = restore_best_weights});
           }),
           py::arg("monitor"), py::arg("min_delta"), py::arg("patience"), py::arg("mode"),
           py::arg("restore_best_weights"))
      .def_property_readonly("stopped_epoch", &EarlyStopping::stopped_epoch);
  py::class_<CSVLogger, Callback, std::shared_ptr<CSVLogger>>(m, "CSVLogger")
      .def(py::init([](std::string filename, std::string separator, bool append) {
             if (separator.size() != 1)
               throw Error(fmt::format("CSVLogger: separator must be one character, got \"{}\"", separator));
             return std::make_shared<CSVLogger>(filename, separator[0], append);
           }),
           py::arg("filename"), py::arg("separator"), py::arg("append"));
  py::class_<TerminateOnNaN, Callback, std::shared_ptr<TerminateOnNaN>>(m, "TerminateOnNaN").def(py::init<>());
  m.def("latest_checkpoint", &latest_checkpoint, py::arg("checkpoint_dir"));
}

void register_model(py::module_& m) {
  py::class_<ModelHandle, std::shared_ptr<ModelHandle>>(m, "Model")
      .def(py::init([](std::string name, uint64_t seed) {
             auto h = std::make_shared<ModelHandle>();
             h->model = std::make_unique<Sequential>(SequentialOptions{.name = name, .seed = seed});
             return h;
           }),
           py::arg("name"), py::arg("seed"))
      .def("add", [](ModelHandle& h, std::shared_ptr<layers::Layer> layer) { h.get().add(std::move(layer)); })
      .def("build",
           [](ModelHandle& h, std::vector<int64_t> shape) {
             h.get().build(Shape(std::span<const int64_t>(shape.data(), shape.size())));
           })
      .def_property_readonly("built", [](ModelHandle& h) { return h.get().built(); })
      .def_property_readonly("name", [](ModelHandle& h) { return h.get().name(); })
      .def_property_readonly("layers", [](ModelHandle& h) { return h.get().layers(); })
      .def_property_readonly("strategy_name", [](ModelHandle& h) { return h.get().strategy()->name(); })
      .def("compile",
           [](ModelHandle& h, const py::object& optimizer, const py::object& loss, std::vector<std::string> metrics) {
             h.get().compile(optimizer_from(optimizer), loss_from(loss), std::move(metrics));
           })
      .def_property_readonly(
          "optimizer", [](ModelHandle& h) -> Optimizer& { return h.get().optimizer(); },
          py::return_value_policy::reference_internal)
      .def_property(
          "stop_training", [](ModelHandle& h) { return h.get().stop_training; },
          [](ModelHandle& h, bool v) { h.get().stop_training = v; })
      .def("fit",
           [](ModelHandle& h, const py::array& x, const py::array& y, int epochs, int64_t batch_size,
              double validation_split, std::optional<py::array> val_x, std::optional<py::array> val_y, bool shuffle,
              const py::list& callbacks, int verbose, int initial_epoch) {
             FitOptions o;
             o.epochs = epochs;
             o.batch_size = batch_size;
             o.validation_split = validation_split;
             o.shuffle = shuffle;
             o.verbose = verbose;
             o.initial_epoch = initial_epoch;
             Tensor tx = from_numpy(x, "fit: x"), ty = from_numpy(y, "fit: y");
             if (val_x && val_y)
               o.validation_data = std::pair{from_numpy(*val_x, "fit: validation_data x"),
                                             from_numpy(*val_y, "fit: validation_data y")};
             o.callbacks = callbacks_from(callbacks);
             Busy busy(h, "fit");
             History history;
             {
               py::gil_scoped_release nogil;
               history = h.get().fit(tx, ty, o);
             }
             return py::make_tuple(history_dict(history), py::cast(history.epochs));
           })
      .def("evaluate",
           [](ModelHandle& h, const py::array& x, const py::array& y, int64_t batch_size, int verbose) {
             Tensor tx = from_numpy(x, "evaluate: x"), ty = from_numpy(y, "evaluate: y");
             Busy busy(h, "evaluate");
             Logs logs;
             {
               py::gil_scoped_release nogil;
               logs = h.get().evaluate(tx, ty, {.batch_size = batch_size, .verbose = verbose});
             }
             return logs_dict(logs);
           })
      .def("predict",
           [](ModelHandle& h, const py::array& x, int64_t batch_size) {
             Tensor tx = from_numpy(x, "predict: x"), out;
             Busy busy(h, "predict");
             {
               py::gil_scoped_release nogil;
               out = h.get().predict(tx, batch_size);
             }
             return to_numpy(out);
           })
      .def("call",
           [](ModelHandle& h, const py::object& x, bool training) {
             Tensor tx = tensor_from(x, "model(x)");
             py::gil_scoped_release nogil;
             return h.get()(tx, training);
           })
      .def_property_readonly(
          "trainable_variables",
          [](ModelHandle& h) { return py::cast(h.get().trainable_variables(), py::return_value_policy::reference); })
      .def("summary", [](ModelHandle& h) { return h.get().summary(); })
      .def("to_json", [](ModelHandle& h) { return h.get().to_json(); })
      .def("count_params", [](ModelHandle& h) { return h.get().count_params(); })
      .def("save_weights", [](ModelHandle& h, const std::string& path) { h.get().save_weights(path); })
      .def("load_weights", [](ModelHandle& h, const std::string& path) { h.get().load_weights(path); })
      .def("get_weights",
           [](ModelHandle& h) {
             py::list out;
             for (Variable* v : h.get().variables()) out.append(to_numpy(v->value.clone()));
             return out;
           })
      .def("set_weights",
           [](ModelHandle& h, const py::list& arrays) {
             std::vector<Variable*> vars = h.get().variables();
             if (arrays.size() != vars.size())
               throw Error(
                   fmt::format("set_weights: the model has {} weights, got {} arrays", vars.size(), arrays.size()));
             for (size_t i = 0; i < vars.size(); ++i) {
               Tensor t = from_numpy(arrays[i].cast<py::array>(), "set_weights");
               if (!(t.shape() == vars[i]->value.shape()))
                 throw Error(fmt::format("set_weights: \"{}\" has shape {}, got {}", vars[i]->name,
                                         vars[i]->value.shape().str(), t.shape().str()));
               vars[i]->value.copy_from(t.astype(vars[i]->value.dtype()));
             }
           })
      .def("free", [](ModelHandle& h) {
        Busy busy(h, "free");
        h.model.reset();
      });
  m.def(
      "model_from_json",
      [](const std::string& text, uint64_t seed) {
        auto h = std::make_shared<ModelHandle>();
        h->model = model_from_json(text, {.seed = seed});
        return h;
      },
      py::arg("text"), py::arg("seed"));
}

void register_strategies(py::module_& m) {
  py::class_<StrategyHandle, std::shared_ptr<StrategyHandle>>(m, "Strategy")
      .def(py::init([](const std::string& spec, int threads_per_replica, std::string auth_dir, bool insecure) {
             auto h = std::make_shared<StrategyHandle>();
             distribute::StrategySettings settings;
             settings.threads_per_replica = threads_per_replica;
             settings.auth_dir = std::move(auth_dir);
             settings.insecure = insecure;
             h->strategy = distribute::make_strategy(spec, settings);
             return h;
           }),
           py::arg("spec"), py::arg("threads_per_replica"), py::arg("auth_dir") = "", py::arg("insecure") = false)
      .def_property_readonly("name", [](StrategyHandle& h) { return h.strategy->name(); })
      .def_property_readonly("num_replicas_in_sync",
                             [](StrategyHandle& h) { return h.strategy->num_replicas_in_sync(); })
      .def_property_readonly("is_chief", [](StrategyHandle& h) { return h.strategy->is_chief(); })
      .def("run",
           [](StrategyHandle& h, py::function fn, const py::tuple& args) {
             distribute::Strategy& s = *h.strategy;
             int replicas = s.num_local_replicas();
             // Each argument's rows split evenly over this process's replicas, in order (the
             // global batch, as a distributed dataset's batch would arrive).
             std::vector<Tensor> whole;
             for (const py::handle& a : args)
               whole.push_back(tensor_from(py::reinterpret_borrow<py::object>(a), "run"));
             distribute::PerReplica<data::Element> parts;
             for (int r = 0; r < replicas; ++r) {
               data::Element e;
               for (const Tensor& t : whole) {
                 if (t.rank() == 0) throw Error("run: arguments need a batch axis to split over the replicas");
                 int64_t n = t.dim(0);
                 e.push_back(t.slice(n * r / replicas, n * (r + 1) / replicas));
               }
               parts.values.push_back(std::move(e));
             }
             std::vector<py::object> results(static_cast<size_t>(replicas));
             {
               py::gil_scoped_release nogil;
               s.run(
                   [&](const data::Element& e) {
                     py::gil_scoped_acquire gil;
                     py::tuple a(e.size());
                     for (size_t i = 0; i < e.size(); ++i) a[i] = py::cast(e[i]);
                     results[static_cast<size_t>(distribute::replica_context()->local_replica_id)] = fn(*a);
                     return 0;
                   },
                   parts);
             }
             return results;
           })
      .def("reduce",
           [](StrategyHandle& h, const std::string& op, const py::list& values) {
             distribute::PerReplica<Tensor> per;
             per.values = tensors_from(values, "reduce");
             if (op != "SUM" && op != "MEAN")
               throw Error(fmt::format("reduce: op must be \"SUM\" or \"MEAN\", got \"{}\"", op));
             distribute::ReduceOp reduce_op = op == "SUM" ? distribute::ReduceOp::Sum : distribute::ReduceOp::Mean;
             py::gil_scoped_release nogil;
             return h.strategy->reduce(reduce_op, per);
           })
      .def("enter",
           [](StrategyHandle& h) {
             h.scopes.push_back(std::make_unique<distribute::Strategy::Scope>(h.strategy.get()));
           })
      .def("exit", [](StrategyHandle& h) {
        if (!h.scopes.empty()) h.scopes.pop_back();
      });
  // The model made in a scope keeps its strategy: Model(...) under enter() is tied to it here.
  m.def("attach_strategy", [](ModelHandle& model, StrategyHandle& strategy) { model.strategy = strategy.strategy; });

  py::module_ hvd = m.def_submodule("hvd", "Horovod's API over Tandem's communicator");
  hvd.def("init", [] { hvd::init(); });
  hvd.def("is_initialized", &hvd::is_initialized);
  hvd.def("rank", &hvd::rank);
  hvd.def("size", &hvd::size);
  hvd.def("local_rank", &hvd::local_rank);
  hvd.def("local_size", &hvd::local_size);
  hvd.def("shutdown", &hvd::shutdown);
  hvd.def(
      "DistributedOptimizer",
      [](Optimizer& optimizer, int backward_passes_per_step, bool average_aggregated_gradients) {
        return std::shared_ptr<Optimizer>(hvd::DistributedOptimizer(
            optimizer.clone(), {.backward_passes_per_step = backward_passes_per_step,
                                .average_aggregated_gradients = average_aggregated_gradients}));
      },
      py::arg("optimizer"), py::arg("backward_passes_per_step"), py::arg("average_aggregated_gradients"));
  py::class_<hvd::BroadcastGlobalVariables, Callback, std::shared_ptr<hvd::BroadcastGlobalVariables>>(
      hvd, "BroadcastGlobalVariablesCallback")
      .def(py::init([](int root) { return std::make_shared<hvd::BroadcastGlobalVariables>(root); }),
           py::arg("root_rank"));
  py::class_<hvd::MetricAverage, Callback, std::shared_ptr<hvd::MetricAverage>>(hvd, "MetricAverageCallback")
      .def(py::init([] { return std::make_shared<hvd::MetricAverage>(); }));
}

}  // namespace tandem::python

PYBIND11_MODULE(_tandem, m) {
  m.doc() = "Tandem's C++ engine; use the tandem package (tandem.keras, tandem.distribute, tandem.hvd).";
  tandem::python::register_errors(m);
  tandem::python::register_tensors(m);
  tandem::python::register_layers(m);
  tandem::python::register_training(m);
  tandem::python::register_model(m);
  tandem::python::register_strategies(m);
}
