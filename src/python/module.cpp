// tandem._tandem: the C++ engine as Python sees it. The Keras-shaped surface (argument names,
// defaults, docstrings) is the Python package's (python/tandem); this module gives it tensors
// over numpy without copies, the model, layers, optimizers, losses, callbacks and strategies, and
// turns tandem::Error into Python exceptions. fit, evaluate and predict run without the GIL;
// whatever calls back into Python (a callback, the Ctrl-C check, freeing a numpy buffer) takes it.
#include "python/binding.h"

PYBIND11_MODULE(_tandem, m) {
  m.doc() = "Tandem's C++ engine; use the tandem package (tandem.keras, tandem.distribute, tandem.hvd).";
  tandem::python::register_errors(m);
  tandem::python::register_tensors(m);
  tandem::python::register_layers(m);
  tandem::python::register_training(m);
  tandem::python::register_devices(m);
  tandem::python::register_data(m);
  tandem::python::register_model(m);
  tandem::python::register_strategies(m);
}
