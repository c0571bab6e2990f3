// tandem._tandem's optimizers, losses, metrics and callbacks.
#include "python/binding.h"

namespace tandem::python {

void register_training(py::module_& m) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def_property_readonly("name", &Optimizer::name)
      .def_property("learning_rate", &Optimizer::current_learning_rate,
                    py::overload_cast<float>(&Optimizer::set_learning_rate))
      .def_property_readonly("iterations", &Optimizer::iterations)
      .def(
          "_set_clipping",
          [](Optimizer& o, float clipnorm, float clipvalue, float global_clipnorm) {
            o.set_clipping({.clipnorm = clipnorm, .clipvalue = clipvalue, .global_clipnorm = global_clipnorm});
          },
          py::arg("clipnorm"), py::arg("clipvalue"), py::arg("global_clipnorm"))
      .def_property("weight_decay", &Optimizer::weight_decay, &Optimizer::set_weight_decay)
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
  py::class_<optimizers::AdamW, optimizers::Adam, std::shared_ptr<optimizers::AdamW>>(m, "AdamW")
      .def(py::init([](float lr, float weight_decay, float beta_1, float beta_2, float epsilon) {
             return std::make_shared<optimizers::AdamW>(
                 lr, weight_decay, optimizers::AdamOptions{.beta_1 = beta_1, .beta_2 = beta_2, .epsilon = epsilon});
           }),
           py::arg("learning_rate"), py::arg("weight_decay"), py::arg("beta_1"), py::arg("beta_2"), py::arg("epsilon"));
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
      .def(py::init([](const std::string& name, bool from_logits, float label_smoothing) {
             Loss named(name);
             return Loss(named.kind(), from_logits, label_smoothing);
           }),
           py::arg("name"), py::arg("from_logits"), py::arg("label_smoothing") = 0.0f)
      .def_property_readonly("name", &Loss::name)
      .def_property_readonly("from_logits", &Loss::from_logits)
      .def_property_readonly("label_smoothing", &Loss::label_smoothing)
      .def_static(
          "outputs",
          [](const std::vector<Loss>& losses, std::vector<float> weights) { return Loss::outputs(losses, weights); },
          py::arg("losses"), py::arg("weights"))
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

}  // namespace tandem::python
