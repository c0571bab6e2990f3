#pragma once
// What the binding's files share: numpy <-> Tensor without copies, the conversions of Python
// arguments, the handles Python holds on models and strategies, and each file's register_*.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/model.h"

namespace tandem::python {

namespace py = pybind11;

// The array's memory as a tensor, without a copy: the tensor keeps the array alive (released
// under the GIL). The caller passes a C-contiguous float32, int32 or uint8 array (the package
// converts anything else once).
Tensor from_numpy(const py::array& a, const char* what);
// The tensor as an array over its own memory (no copy when it lives on the host contiguous).
py::array to_numpy(const Tensor& t);
// A numpy array (used in place where it can be) or a tandem Tensor.
Tensor tensor_from(const py::object& o, const char* what);
std::vector<Tensor> tensors_from(const py::list& list, const char* what);
py::dict logs_dict(const Logs& logs);
py::dict history_dict(const History& h);
std::optional<Shape> shape_of(const std::optional<std::vector<int64_t>>& dims);
MonitorMode monitor_mode(const std::string& mode);

// --- strategies ---

// A strategy made from Python; `owner` is a weak reference to the tandem.distribute object that
// holds it (what get_strategy() returns for it). While a scope of it is open, `open` holds that
// object (or, without one, the handle's own), so that the strategy outlives the scope's entry on
// the engine's stack even where the Python code keeps no reference.
struct StrategyHandle {
  std::shared_ptr<distribute::Strategy> strategy;
  py::object owner;
  std::vector<py::object> open;
};

// --- the model ---

struct ModelHandle {
  std::shared_ptr<distribute::Strategy> strategy;  // kept alive while the model lives
  std::unique_ptr<Model> model;
  std::atomic<bool> busy{false};  // fit, evaluate or predict running (without the GIL)
  Model& get() {
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

void register_errors(py::module_& m);
void register_tensors(py::module_& m);
void register_layers(py::module_& m);
void register_training(py::module_& m);
void register_model(py::module_& m);
void register_strategies(py::module_& m);
void register_data(py::module_& m);
void register_devices(py::module_& m);

}  // namespace tandem::python
