// tandem._tandem's devices: the logical CPU devices (tandem/devices.h) that tf.config shares the
// cores out as, and the placement scope tf.device opens.
#include <fmt/format.h>

#include "python/binding.h"
#include "tandem/cuda.h"
#include "tandem/devices.h"

namespace tandem::python {

namespace {

// One `with tf.device(...)` block: the engine's placement scope, opened and closed on the thread
// that runs the block (the scope is the thread's).
struct Placement {
  Device device;
  std::unique_ptr<DeviceScope> scope;
};

}  // namespace

void register_devices(py::module_& m) {
  m.def(
      "set_cpu_devices",
      [](const std::vector<std::pair<int, int64_t>>& devices) {
        std::vector<CpuDeviceOptions> options;
        for (const auto& [threads, memory] : devices) {
          if (threads < 0) throw Error(fmt::format("a logical device's threads must be >= 0, got {}", threads));
          if (memory < 0) throw Error(fmt::format("a logical device's memory limit must be >= 0, got {}", memory));
          options.push_back({.threads = threads, .memory_limit_bytes = memory});
        }
        set_cpu_devices(options);
      },
      py::arg("devices"));
  m.def("num_cpu_devices", &num_cpu_devices);
  m.def(
      "cpu_device_options",
      [](int index) {
        CpuDeviceOptions o = cpu_device_options(index);
        return std::pair{o.threads, o.memory_limit_bytes};
      },
      py::arg("index"));
  // The GPUs (where the build has the CUDA device), and why there are none.
  m.def("gpu_names", [] {
    std::vector<std::string> names;
    if (cuda::registered())
      for (const cuda::GpuInfo& g : cuda::devices()) names.push_back(g.name);
    return names;
  });
  m.def("physical_gpu_count", [] { return cuda::registered() ? cuda::physical_device_count() : 0; });
  // Logical GPUs on physical GPU `physical`: their memory limits in bytes (0: none).
  m.def(
      "set_logical_gpus",
      [](int physical, const std::vector<int64_t>& limits) {
        if (!cuda::registered()) throw Error("tf.config: this build has no CUDA device, so no GPU to split");
        std::vector<cuda::LogicalGpuOptions> options;
        for (int64_t limit : limits) options.push_back({.memory_limit_bytes = limit});
        cuda::set_logical_devices(physical, options);
      },
      py::arg("physical"), py::arg("limits"));
  m.def(
      "logical_gpus",
      [](int physical) {
        std::vector<int64_t> limits;
        if (cuda::registered())
          for (const cuda::LogicalGpuOptions& o : cuda::logical_devices(physical))
            limits.push_back(o.memory_limit_bytes);
        return limits;
      },
      py::arg("physical"));
  m.def("why_no_gpu", [] { return cuda::registered() ? cuda::why_none() : "this build has no CUDA device"; });
  m.def("enable_tensor_float_32", &cuda::enable_tensor_float_32, py::arg("enabled"));
  m.def("tensor_float_32_enabled", &cuda::tensor_float_32_enabled);
  py::class_<Placement>(m, "Placement")
      .def(py::init([](bool gpu, int index) {
             Device d = gpu ? Device::cuda(index) : Device::cpu(index);
             if (gpu && (!cuda::registered() || index >= cuda::device_count()))
               throw Error(fmt::format("tf.device: there is no device /gpu:{} ({})", index,
                                       cuda::registered() && cuda::device_count() > 0
                                           ? fmt::format("this machine has {} GPUs", cuda::device_count())
                                       : cuda::registered() ? "no GPU can be used here: " + cuda::why_none()
                                                            : std::string("this build has no CUDA device")));
             check_device(d, "tf.device");
             return Placement{d, nullptr};
           }),
           py::arg("gpu"), py::arg("index"))
      .def("enter",
           [](Placement& p) {
             if (p.scope) throw Error("tf.device: this placement is already open; open it once per with block");
             p.scope = std::make_unique<DeviceScope>(p.device);
           })
      .def("exit", [](Placement& p) { p.scope.reset(); });
}

}  // namespace tandem::python
