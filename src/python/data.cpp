// tandem._tandem's Dataset: the C++ input pipeline (tandem::data::Dataset) as tandem.data builds
// it. An element crosses into Python as a flat list of numpy arrays over the tensors' own memory;
// the package (python/tandem/data.py) gives it back its tuple or dict shape. map and filter take
// Python callables, which the pipeline's threads call with the GIL held.
#include <fmt/format.h>

#include <set>

#include "python/binding.h"
#include "tandem/data/dataset.h"

namespace tandem::python {
namespace {

using data::Dataset;
using data::Element;

// A Python callable that the pipeline's threads call and may be the last to hold: called and
// freed with the GIL.
using HeldFunction = std::shared_ptr<py::function>;

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

HeldFunction hold(py::function fn) {
  return HeldFunction(new py::function(std::move(fn)), [](py::function* f) {
    if (!Py_IsInitialized() || finalizing()) return;  // the interpreter is going: leave the object to it
    py::gil_scoped_acquire gil;
    delete f;
  });
}

// Takes the GIL for a call into Python from a pipeline thread; refused once the interpreter is
// shutting down (the thread must not touch it then).
class PythonCall {
 public:
  PythonCall() {
    if (finalizing()) throw Error("Dataset: the Python interpreter is shutting down");
  }

 private:
  py::gil_scoped_acquire gil_;
};

// An element as Python sees it: read-only arrays over the tensors' memory (a slice of the
// caller's array, or a batch), since TensorFlow's elements are immutable: writing into one would
// change the source data for every later pass.
py::list to_list(const Element& element) {
  py::list out;
  for (const Tensor& t : element) {
    py::array a = to_numpy(t);
    a.attr("setflags")(py::arg("write") = false);
    out.append(std::move(a));
  }
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
// so it is freed without it. The open ones are listed (under the GIL) so that they are all
// stopped at exit, before the interpreter goes away under their threads.
struct IteratorHandle;
std::set<IteratorHandle*>& open_iterators() {
  static auto* open = new std::set<IteratorHandle*>;
  return *open;
}

struct IteratorHandle {
  std::unique_ptr<data::Iterator> it;
  IteratorHandle() { open_iterators().insert(this); }
  IteratorHandle(const IteratorHandle&) = delete;
  IteratorHandle& operator=(const IteratorHandle&) = delete;
  ~IteratorHandle() {
    open_iterators().erase(this);
    close();
  }
  void close() {
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
      .def_static("from_tensor_slices",
                  [](const py::list& components) {
                    std::vector<Tensor> tensors = tensors_from(components, "from_tensor_slices");
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
                  PythonCall python;
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
              PythonCall python;
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
  // At exit, before the interpreter finalizes: stop every open pipeline (an iterator kept in a
  // module's variable would otherwise have threads calling into a dying interpreter).
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    for (IteratorHandle* h : std::set<IteratorHandle*>(open_iterators())) h->close();
  }));
  m.attr("AUTOTUNE") = Dataset::kAutotune;
  m.attr("INFINITE_CARDINALITY") = Dataset::kInfinite;
  m.attr("UNKNOWN_CARDINALITY") = Dataset::kUnknown;
}

}  // namespace tandem::python
