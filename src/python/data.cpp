// tandem._tandem's Dataset: the C++ input pipeline (tandem::data::Dataset) as tandem.data builds
// it. An element crosses into Python as a flat list of numpy arrays over the tensors' own memory;
// the package (python/tandem/data.py) gives it back its tuple or dict shape. map and filter take
// Python callables, which the pipeline's threads call with the GIL held.
#include <fmt/format.h>

#include "python/binding.h"
#include "tandem/data/dataset.h"

namespace tandem::python {
namespace {

using data::Dataset;
using data::Element;

// A Python callable that the pipeline's threads call and may be the last to hold: called and
// freed with the GIL.
using HeldFunction = std::shared_ptr<py::function>;

HeldFunction hold(py::function fn) {
  return HeldFunction(new py::function(std::move(fn)), [](py::function* f) {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: leave the object to it
    py::gil_scoped_acquire gil;
    delete f;
  });
}

py::list to_list(const Element& element) {
  py::list out;
  for (const Tensor& t : element) out.append(to_numpy(t));
  return out;
}

// The components a Python function returned: a list or tuple of arrays (the package has already
// made each a C-contiguous float32, int32 or uint8 array).
Element from_result(const py::handle& result, const char* what) {
  if (!py::isinstance<py::list>(result) && !py::isinstance<py::tuple>(result))
    throw Error(
        fmt::format("{}: expected the function's components as a list, got {}", what, std::string(py::repr(result))));
  Element out;
  for (const py::handle& h : result) out.push_back(tensor_from(py::reinterpret_borrow<py::object>(h), what));
  return out;
}

// An iterator over one pass; freeing it stops the pipeline's threads, which may wait for the GIL,
// so it is freed without it.
struct IteratorHandle {
  std::unique_ptr<data::Iterator> it;
  IteratorHandle() = default;
  IteratorHandle(const IteratorHandle&) = delete;
  IteratorHandle& operator=(const IteratorHandle&) = delete;
  ~IteratorHandle() {
    if (it && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      it.reset();
    }
  }
};

}  // namespace

void register_data(py::module_& m) {
  py::class_<IteratorHandle>(m, "DatasetIterator").def("next", [](IteratorHandle& h) -> py::object {
    if (!h.it) return py::none();
    std::optional<Element> e;
    {
      py::gil_scoped_release nogil;  // the pipeline's threads may need it for a map
      e = h.it->next();
    }
    if (!e) {
      py::gil_scoped_release nogil;
      h.it.reset();
      return py::none();
    }
    return to_list(*e);
  });

  py::class_<Dataset>(m, "Dataset")
      .def_static(
          "from_tensor_slices",
          [](const py::list& components) {
            if (components.empty()) throw Error("from_tensor_slices: expected at least one array");
            std::vector<Tensor> tensors = tensors_from(components, "from_tensor_slices");
            for (size_t i = 0; i < tensors.size(); ++i) {
              if (tensors[i].rank() == 0)
                throw Error(fmt::format("from_tensor_slices: component {} is a scalar; slices need a first axis", i));
              if (tensors[i].dim(0) != tensors[0].dim(0))
                throw Error(fmt::format("from_tensor_slices: component 0 has {} rows but component {} has {}",
                                        tensors[0].dim(0), i, tensors[i].dim(0)));
            }
            return Dataset::from_tensor_slices(std::move(tensors));
          })
      .def("batch", &Dataset::batch, py::arg("size"), py::arg("drop_remainder"))
      .def("shuffle", &Dataset::shuffle, py::arg("buffer_size"), py::arg("seed"), py::arg("reshuffle_each_iteration"))
      .def("repeat", &Dataset::repeat, py::arg("count"))
      .def("take", &Dataset::take, py::arg("count"))
      .def("skip", &Dataset::skip, py::arg("count"))
      .def("cache", &Dataset::cache, py::arg("path"))
      .def("prefetch", &Dataset::prefetch, py::arg("buffer"))
      .def("shard", &Dataset::shard, py::arg("num_shards"), py::arg("index"))
      .def(
          "map",
          [](const Dataset& d, py::function fn, int parallel_calls) {
            HeldFunction f = hold(std::move(fn));
            return d.map(
                [f](Element e) {
                  py::gil_scoped_acquire gil;
                  py::object result = (*f)(to_list(e));
                  return from_result(result, "Dataset.map");
                },
                parallel_calls);
          },
          py::arg("fn"), py::arg("parallel_calls"))
      .def(
          "filter",
          [](const Dataset& d, py::function fn) {
            HeldFunction f = hold(std::move(fn));
            return d.filter([f](const Element& e) {
              py::gil_scoped_acquire gil;
              return (*f)(to_list(e)).cast<bool>();
            });
          },
          py::arg("predicate"))
      .def("cardinality", &Dataset::cardinality)
      .def(
          "iterate",
          [](const Dataset& d, int epoch) {
            auto h = std::make_unique<IteratorHandle>();
            py::gil_scoped_release nogil;  // starting a pipeline may run its first stages
            h->it = d.iterate(epoch);
            return h;
          },
          py::arg("epoch"));
  m.attr("AUTOTUNE") = Dataset::kAutotune;
  m.attr("INFINITE_CARDINALITY") = Dataset::kInfinite;
  m.attr("UNKNOWN_CARDINALITY") = Dataset::kUnknown;
}

}  // namespace tandem::python
