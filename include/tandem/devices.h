#pragma once
// Logical CPU devices and placement, as TensorFlow's logical device configuration and tf.device.
//
// The host's cores can be shared out as devices cpu:0 … cpu:N-1 (set_cpu_devices). Each has its
// intra-op threads and an optional memory limit; tensors made there count against it. Layers made
// inside a placement scope live on its device: their variables are made there, and a model runs
// each on its device, its activations moved there and their gradients moved back (every move a
// copy, as between real devices), with that device's threads. Results are the same bits as on one
// device: a move changes where a tensor lives, not its values.
//
//   set_cpu_devices({{.threads = 1}, {.threads = 1, .memory_limit_bytes = 64 << 20}});
//   Sequential model;
//   model.add(layers::Dense(256, "relu"));      // unplaced: the device of the model's input (cpu)
//   {
//     auto on1 = with_device(Device::cpu(1));   // tf.device("/cpu:1")
//     model.add(layers::Dense(10));             // lives and runs on cpu:1
//   }
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem {

struct CpuDeviceOptions {
  int threads = 0;                 // its ops' intra-op threads (0: the calling thread's setting)
  int64_t memory_limit_bytes = 0;  // the most bytes of tensors living there at once (0: no limit)
};
inline constexpr int kMaxCpuDevices = 256;

// Makes the logical CPU devices, one per entry (1 to kMaxCpuDevices of them). Done before tensors
// live on any of them past cpu:0 and not while other threads make tensors. Without it there is
// one, cpu:0, with no limit.
void set_cpu_devices(const std::vector<CpuDeviceOptions>& devices);
int num_cpu_devices();
// Device cpu:index's options; fails for a device that was not made.
CpuDeviceOptions cpu_device_options(int index);
// The most bytes of tensors that may live on `device` at once (a CPU device's memory_limit_bytes;
// 0: no limit, as for other devices, whose allocators say when they run out).
int64_t device_memory_limit(Device device);
// The bytes of tensors living on a CPU device now (counted where it has a limit or is not cpu:0).
int64_t device_bytes_in_use(Device device);
// A size as messages give it: "800 bytes", "310.3 kB", "8.2 MB", "1.50 GB".
std::string memory_size(int64_t bytes);
// Fails unless `device` exists (a made CPU device, or a device kind with its memory registered).
void check_device(Device device, const char* who);

// The placement scope: layers made on this thread while it lives are placed on `device`.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  std::optional<Device> previous_;
};
[[nodiscard]] inline DeviceScope with_device(Device device) { return DeviceScope(device); }
// The innermost placement scope's device on this thread, if any.
std::optional<Device> placement_device();

// The device whose threads the calling thread's ops run with (a placed layer's, while it runs;
// its gradients', while they are computed). Its threads, where set, take the place of the
// thread's own setting in num_threads().
Device compute_device();
void set_compute_device(Device device);
class ComputeOn {
 public:
  explicit ComputeOn(Device device) : previous_(compute_device()) { set_compute_device(device); }
  ~ComputeOn() { set_compute_device(previous_); }
  ComputeOn(const ComputeOn&) = delete;
  ComputeOn& operator=(const ComputeOn&) = delete;

 private:
  Device previous_;
};

}  // namespace tandem
