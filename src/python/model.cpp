// tandem._tandem's Sequential: compile, fit, evaluate, predict, weights and JSON. fit, evaluate and
// predict run without the GIL; a Python callback and the Ctrl-C check between batches take it.
#include "python/binding.h"

#include "tandem/model_json.h"

namespace tandem::python {
namespace {

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

std::unique_ptr<Optimizer> optimizer_from(const py::object& o) {
  if (py::isinstance<py::str>(o)) return optimizers::by_name(o.cast<std::string>());
  if (py::isinstance<Optimizer>(o)) return o.cast<Optimizer&>().clone();
  throw Error(fmt::format("compile: optimizer must be a name (\"adam\") or an optimizer object, got {}",
                          std::string(py::repr(o))));
}

Loss loss_from(const py::object& o) {
  if (py::isinstance<py::str>(o)) return Loss(o.cast<std::string>());
  if (py::isinstance<Loss>(o)) return o.cast<Loss>();
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {  // one per output
    std::vector<Loss> losses;
    for (const py::handle& each : o) losses.push_back(loss_from(py::reinterpret_borrow<py::object>(each)));
    return Loss::outputs(std::move(losses));
  }
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

}  // namespace

void register_model(py::module_& m) {
  py::class_<ModelHandle, std::shared_ptr<ModelHandle>>(m, "Model")
      .def(py::init([](std::string name, uint64_t seed) {
             auto h = std::make_shared<ModelHandle>();
             h->model = std::make_unique<Sequential>(SequentialOptions{.name = name, .seed = seed});
             return h;
           }),
           py::arg("name"), py::arg("seed"))
      // Keras' functional Model(inputs, outputs).
      .def_static(
          "functional",
          [](std::vector<layers::SymbolicTensor> inputs, std::vector<layers::SymbolicTensor> outputs, std::string name,
             uint64_t seed) {
            auto h = std::make_shared<ModelHandle>();
            h->model = std::make_unique<Functional>(inputs, outputs, ModelOptions{.name = name, .seed = seed});
            return h;
          },
          py::arg("inputs"), py::arg("outputs"), py::arg("name"), py::arg("seed"))
      .def_property_readonly("kind", [](ModelHandle& h) { return std::string(h.get().kind()); })
      // A Functional's inputs (a Sequential: none): per-sample shapes and names.
      .def_property_readonly("input_shapes",
                             [](ModelHandle& h) {
                               std::vector<std::vector<int64_t>> out;
                               for (const Shape& s : h.get().input_shapes()) out.emplace_back(s.begin(), s.end());
                               return out;
                             })
      .def_property_readonly("input_names", [](ModelHandle& h) { return h.get().input_names(); })
      .def_property_readonly("output_shapes",
                             [](ModelHandle& h) {
                               std::vector<std::vector<int64_t>> out;
                               for (const Shape& s : h.get().output_shapes()) out.emplace_back(s.begin(), s.end());
                               return out;
                             })
      .def_property_readonly("output_names", [](ModelHandle& h) { return h.get().output_names(); })
      .def("add", [](ModelHandle& h, std::shared_ptr<layers::Layer> layer) { h.get().add(std::move(layer)); })
      .def("build",
           [](ModelHandle& h, std::vector<int64_t> shape) {
             h.get().build(Shape(std::span<const int64_t>(shape.data(), shape.size())));
           })
      .def_property_readonly("built", [](ModelHandle& h) { return h.get().built(); })
      .def_property_readonly("name", [](ModelHandle& h) { return h.get().name(); })
      .def_property_readonly("seed", [](ModelHandle& h) { return h.get().seed(); })
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
           [](ModelHandle& h, const py::object& x, const py::object& y, int epochs, int64_t batch_size,
              int64_t steps_per_epoch, int dataset_pass, double validation_split, const py::object& validation,
              bool shuffle, const py::list& callbacks, int verbose, int initial_epoch, const py::object& sample_weight,
              const std::map<int64_t, float>& class_weight) {
             FitOptions o;
             if (!sample_weight.is_none())
               o.sample_weight = from_numpy(sample_weight.cast<py::array>(), "fit: sample_weight");
             o.class_weight = class_weight;
             o.epochs = epochs;
             o.batch_size = batch_size;
             o.steps_per_epoch = steps_per_epoch;
             o.dataset_pass = dataset_pass;
             o.validation_split = validation_split;
             o.shuffle = shuffle;
             o.verbose = verbose;
             o.initial_epoch = initial_epoch;
             // validation: None, a Dataset, or (x_val, y_val[, weights]) arrays.
             if (py::isinstance<data::Dataset>(validation)) {
               o.validation_dataset = validation.cast<data::Dataset>();
             } else if (!validation.is_none()) {
               auto items = validation.cast<py::tuple>();
               o.validation_data = std::pair{from_numpy(items[0].cast<py::array>(), "fit: validation_data x"),
                                             from_numpy(items[1].cast<py::array>(), "fit: validation_data y")};
               if (items.size() > 2 && !items[2].is_none())
                 o.validation_sample_weight =
                     from_numpy(items[2].cast<py::array>(), "fit: validation_data sample weights");
             }
             std::optional<data::Dataset> dataset;
             Tensor tx, ty;
             if (py::isinstance<data::Dataset>(x)) {
               dataset = x.cast<data::Dataset>();
             } else {
               tx = from_numpy(x.cast<py::array>(), "fit: x");
               ty = from_numpy(y.cast<py::array>(), "fit: y");
             }
             o.callbacks = callbacks_from(callbacks);
             Busy busy(h, "fit");
             History history;
             {
               py::gil_scoped_release nogil;
               history = dataset ? h.get().fit(*dataset, o) : h.get().fit(tx, ty, o);
             }
             return py::make_tuple(history_dict(history), py::cast(history.epochs));
           })
      .def("evaluate_dataset",
           [](ModelHandle& h, const data::Dataset& dataset, int64_t steps, int verbose, int pass) {
             Busy busy(h, "evaluate");
             Logs logs;
             {
               py::gil_scoped_release nogil;
               logs = h.get().evaluate(dataset, steps, verbose, pass);
             }
             return logs_dict(logs);
           })
      .def("predict_dataset",
           [](ModelHandle& h, const data::Dataset& dataset, int64_t steps, int pass) {
             Busy busy(h, "predict");
             Tensor out;
             {
               py::gil_scoped_release nogil;
               out = h.get().predict(dataset, steps, pass);
             }
             return to_numpy(out);
           })
      .def("evaluate",
           [](ModelHandle& h, const py::array& x, const py::array& y, int64_t batch_size, int verbose,
              const py::object& sample_weight) {
             Tensor tx = from_numpy(x, "evaluate: x"), ty = from_numpy(y, "evaluate: y"), tw;
             if (!sample_weight.is_none()) tw = from_numpy(sample_weight.cast<py::array>(), "evaluate: sample_weight");
             Busy busy(h, "evaluate");
             Logs logs;
             {
               py::gil_scoped_release nogil;
               logs = h.get().evaluate(tx, ty, {.batch_size = batch_size, .verbose = verbose, .sample_weight = tw});
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
           [](ModelHandle& h, const py::object& x, bool training) -> py::object {
             Tensor tx = tensor_from(x, "model(x)");
             Tensor y;
             {
               py::gil_scoped_release nogil;
               y = h.get()(tx, training);
             }
             if (h.get().output_shapes().size() <= 1) return py::cast(y);
             return py::cast(layers::unpack_outputs(h.get().output_shapes(), y));  // a list, as Keras'
           })
      .def_property_readonly(
          "trainable_variables",
          [](ModelHandle& h) { return py::cast(h.get().trainable_variables(), py::return_value_policy::reference); })
      .def_property_readonly("losses", [](ModelHandle& h) { return h.get().losses(); })
      .def("summary", [](ModelHandle& h) { return h.get().summary(); })
      .def("to_json", [](ModelHandle& h) { return h.get().to_json(); })
      .def("count_params", [](ModelHandle& h) { return h.get().count_params(); })
      .def("save_weights", [](ModelHandle& h, const std::string& path) { h.get().save_weights(path); })
      .def("save", [](ModelHandle& h, const std::string& path) { h.get().save(path); })
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
  m.def(
      "load_model",
      [](const std::string& path, uint64_t seed, bool compile) {
        auto h = std::make_shared<ModelHandle>();
        h->model = load_model(path, {.seed = seed}, compile);
        return h;
      },
      py::arg("path"), py::arg("seed"), py::arg("compile"));
}

}  // namespace tandem::python
