// tandem._tandem's layers.
#include "python/binding.h"

#include <array>

namespace tandem::python {

void register_layers(py::module_& m) {
  using namespace layers;
  m.def("set_global_policy", &mixed_precision::set_global_policy, py::arg("name"));
  m.def("global_policy", &mixed_precision::global_policy);
  // Whether this CPU multiplies in bf16 (AVX512_BF16 or AMX): elsewhere mixed_bfloat16 keeps float32 products.
  m.def("cpu_has_bf16_products", [] { return ops::has_bf16_products(Device::cpu()); });
  // Keras' KerasTensor: a keras.Input, or a layer's output in a model being written.
  py::class_<SymbolicTensor>(m, "SymbolicTensor")
      .def_property_readonly("shape",
                             [](const SymbolicTensor& t) {
                               py::list dims;
                               dims.append(py::none());  // the batch axis, as Keras shows it
                               for (int64_t d : t.shape()) dims.append(d);
                               return py::tuple(dims);
                             })
      .def_property_readonly("is_input", [](const SymbolicTensor& t) { return !t.node()->layer; })
      .def_property_readonly("name", [](const SymbolicTensor& t) { return t.node()->name; })
      .def("__repr__", [](const SymbolicTensor& t) {
        return fmt::format("<KerasTensor shape={} {}>", t.shape().str_with_batch(),
                           t.node()->layer ? "from " + t.node()->layer->label() : std::string("input"));
      });
  m.def(
      "Input",
      [](std::vector<int64_t> shape, std::string name) {
        return Input(Shape(std::span<const int64_t>(shape.data(), shape.size())), std::move(name));
      },
      py::arg("shape"), py::arg("name"));
  py::class_<Layer, std::shared_ptr<Layer>>(m, "Layer")
      // Keras' functional API: the layer called on a KerasTensor (a merge layer on a list of them);
      // the same layer object called again is shared.
      .def(
          "__call__",
          [](const std::shared_ptr<Layer>& l, const py::object& inputs) {
            if (py::isinstance<SymbolicTensor>(inputs)) {
              SymbolicTensor x = inputs.cast<SymbolicTensor>();
              return call_symbolic(l, std::span<const SymbolicTensor>(&x, 1));
            }
            if (py::isinstance<py::list>(inputs) || py::isinstance<py::tuple>(inputs)) {
              std::vector<SymbolicTensor> xs;
              for (const py::handle& h : inputs) {
                if (!py::isinstance<SymbolicTensor>(h))
                  throw Error(
                      fmt::format("{}: called on a list holding {}; the functional API calls layers on "
                                  "keras.Input tensors and other layers' outputs",
                                  l->label(), py::str(py::type::of(h)).cast<std::string>()));
                xs.push_back(h.cast<SymbolicTensor>());
              }
              return call_symbolic(l, xs);
            }
            throw Error(
                fmt::format("{}: called on {}; Tandem calls layers on keras.Input tensors and other layers' outputs "
                            "(the functional API): to run one on data, put it in a model and call the model",
                            l->label(), py::str(py::type::of(inputs)).cast<std::string>()));
          },
          py::arg("inputs"))
      .def_property_readonly("name", &Layer::name)
      .def_property_readonly("type", &Layer::type)
      .def_property_readonly("built", &Layer::built)
      .def_property_readonly("device",
                             [](const Layer& l) -> py::object {
                               if (!l.device()) return py::none();
                               return py::str(l.device()->name());
                             })
      .def("count_params", &Layer::count_params)
      // Keras' layer.trainable: False freezes the layer's variables (and runs batch normalization
      // in inference mode); the next fit or optimizer.apply_gradients follows it.
      .def_property("trainable", &Layer::trainable, &Layer::set_trainable)
      // Keras' kernel_regularizer, bias_regularizer and activity_regularizer, each (l1, l2).
      .def(
          "set_regularizers",
          [](Layer& l, std::pair<float, float> kernel, std::pair<float, float> bias, std::pair<float, float> activity) {
            l.set_regularizers({.kernel = {kernel.first, kernel.second},
                                .bias = {bias.first, bias.second},
                                .activity = {activity.first, activity.second}});
          },
          py::arg("kernel"), py::arg("bias"), py::arg("activity"))
      .def_property_readonly("regularizers",
                             [](const Layer& l) {
                               py::dict out;
                               for (auto [key, r] : {std::pair{"kernel", l.regularizers().kernel},
                                                     {"bias", l.regularizers().bias},
                                                     {"activity", l.regularizers().activity}})
                                 out[key] = py::make_tuple(r.l1, r.l2);
                               return out;
                             })
      .def_property_readonly("dtype_policy", &Layer::dtype_policy)
      .def("set_dtype_policy", &Layer::set_dtype_policy, py::arg("name"))
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
      .def(py::init([](float rate, std::string name, std::optional<std::vector<int64_t>> input_shape,
                       std::optional<uint64_t> seed) {
             return std::make_shared<Dropout>(
                 rate, DropoutOptions{.name = name, .input_shape = shape_of(input_shape), .seed = seed});
           }),
           py::arg("rate"), py::arg("name"), py::arg("input_shape"), py::arg("seed") = py::none());
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
  py::class_<ReLU, layers::Activation, std::shared_ptr<ReLU>>(m, "ReLU").def(
      py::init([](std::string name, std::optional<std::vector<int64_t>> input_shape) {
        return std::make_shared<ReLU>(ActivationOptions{.name = name, .input_shape = shape_of(input_shape)});
      }),
      py::arg("name"), py::arg("input_shape"));
  py::class_<GlobalAveragePooling2D, Layer, std::shared_ptr<GlobalAveragePooling2D>>(m, "GlobalAveragePooling2D")
      .def(py::init([](bool keepdims, std::string name, std::optional<std::vector<int64_t>> input_shape) {
             return std::make_shared<GlobalAveragePooling2D>(
                 GlobalPooling2DOptions{.keepdims = keepdims, .name = name, .input_shape = shape_of(input_shape)});
           }),
           py::arg("keepdims"), py::arg("name"), py::arg("input_shape"));
  py::class_<ZeroPadding2D, Layer, std::shared_ptr<ZeroPadding2D>>(m, "ZeroPadding2D")
      .def(py::init(
               [](std::array<int64_t, 4> padding, std::string name, std::optional<std::vector<int64_t>> input_shape) {
                 return std::make_shared<ZeroPadding2D>(
                     padding, ZeroPadding2DOptions{.name = name, .input_shape = shape_of(input_shape)});
               }),
           py::arg("padding"), py::arg("name"), py::arg("input_shape"));
  py::class_<Merge, Layer, std::shared_ptr<Merge>>(m, "Merge");
  py::class_<layers::Add, Merge, std::shared_ptr<layers::Add>>(m, "Add").def(py::init<std::string>(), py::arg("name"));
  py::class_<Subtract, Merge, std::shared_ptr<Subtract>>(m, "Subtract").def(py::init<std::string>(), py::arg("name"));
  py::class_<Multiply, Merge, std::shared_ptr<Multiply>>(m, "Multiply").def(py::init<std::string>(), py::arg("name"));
  py::class_<Concatenate, Merge, std::shared_ptr<Concatenate>>(m, "Concatenate")
      .def(py::init<int, std::string>(), py::arg("axis"), py::arg("name"));
}

}  // namespace tandem::python
