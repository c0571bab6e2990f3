// Logical CPU devices (devices.h): their options, the bytes living on each, the placement scope
// and the compute device of each thread.
#include "tandem/devices.h"

#include <array>
#include <atomic>

#include "core/device_memory.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem {
namespace {

struct CpuDevice {
  CpuDeviceOptions options;
  std::atomic<int64_t> in_use{0};
};
std::array<CpuDevice, kMaxCpuDevices> cpu_devices;
std::atomic<int> cpu_device_count{1};
std::atomic<bool> any_limit{false};

thread_local std::optional<Device> placement;
thread_local Device computing = Device::cpu();

}  // namespace

std::string memory_size(int64_t bytes) {
  auto b = static_cast<double>(bytes);
  if (bytes < 1000) return fmt::format("{} bytes", bytes);
  if (bytes < 1000000) return fmt::format("{:.1f} kB", b / 1e3);
  if (bytes < 1000000000) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.2f} GB", b / 1e9);
}

void set_cpu_devices(const std::vector<CpuDeviceOptions>& devices) {
  if (devices.empty() || devices.size() > kMaxCpuDevices)
    fail("set_cpu_devices: expected 1 to {} devices, got {}", kMaxCpuDevices, devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    const CpuDeviceOptions& d = devices[i];
    if (d.threads < 0 || d.threads > kMaxThreads)
      fail("set_cpu_devices: cpu:{}'s threads must be from 1 to {} (or 0: the caller's setting), got {}", i,
           kMaxThreads, d.threads);
    if (d.memory_limit_bytes < 0)
      fail("set_cpu_devices: cpu:{}'s memory_limit_bytes must be positive (or 0: no limit), got {}", i,
           d.memory_limit_bytes);
  }
  for (size_t i = devices.size(); i < static_cast<size_t>(cpu_device_count.load()); ++i)
    if (cpu_devices[i].in_use.load() != 0)
      fail("set_cpu_devices: cpu:{} still holds {} of tensors; free them before removing it", i,
           memory_size(cpu_devices[i].in_use.load()));
  bool limited = false;
  for (size_t i = 0; i < devices.size(); ++i) {
    cpu_devices[i].options = devices[i];
    limited = limited || devices[i].memory_limit_bytes > 0;
  }
  for (size_t i = devices.size(); i < kMaxCpuDevices; ++i) cpu_devices[i].options = {};
  cpu_device_count = static_cast<int>(devices.size());
  any_limit = limited;
}

int num_cpu_devices() { return cpu_device_count.load(std::memory_order_relaxed); }

CpuDeviceOptions cpu_device_options(int index) {
  check_device(Device::cpu(index), "cpu_device_options");
  return cpu_devices[static_cast<size_t>(index)].options;
}

int64_t device_memory_limit(Device device) {
  if (device.kind != Device::Kind::CPU) return 0;
  return cpu_device_options(device.index).memory_limit_bytes;
}

int64_t device_bytes_in_use(Device device) {
  check_device(device, "device_bytes_in_use");
  if (device.kind != Device::Kind::CPU) return 0;
  return cpu_devices[static_cast<size_t>(device.index)].in_use.load(std::memory_order_relaxed);
}

void check_device(Device device, const char* who) {
  if (device.kind == Device::Kind::CPU) {
    int count = num_cpu_devices();
    if (device.index < 0 || device.index >= count)
      fail("{}: there is no device cpu:{}; {} logical CPU device{} made (cpu:0{}; set_cpu_devices makes more)", who,
           device.index, count, count == 1 ? " is" : "s are", count == 1 ? "" : fmt::format(" to cpu:{}", count - 1));
    return;
  }
  if (core::device_memory(device.kind) == nullptr)
    fail("{}: device {} is not available in this build (expected cpu){}", who, device.name(),
         device.kind == Device::Kind::CUDA ? "; a GPU's memory is registered by tandem::cuda::registered() "
                                             "(tandem/cuda.h; tandem/tandem.h calls it) in a build with CUDA"
                                           : "");
}

DeviceScope::DeviceScope(Device device) : previous_(placement) {
  check_device(device, "with_device");
  placement = device;
}
DeviceScope::~DeviceScope() { placement = previous_; }
std::optional<Device> placement_device() { return placement; }

Device compute_device() { return computing; }
void set_compute_device(Device device) { computing = device; }

namespace core {

int compute_device_threads() {
  const Device d = computing;
  if (d.kind != Device::Kind::CPU || d.index < 0 || d.index >= kMaxCpuDevices) return 0;
  return cpu_devices[static_cast<size_t>(d.index)].options.threads;
}

bool charge_cpu_device(Device device, size_t bytes) {
  if (device.index == 0 && !any_limit.load(std::memory_order_relaxed)) return false;  // the common case: uncounted
  check_device(device, "Tensor::empty");
  CpuDevice& d = cpu_devices[static_cast<size_t>(device.index)];
  auto n = static_cast<int64_t>(bytes);
  int64_t before = d.in_use.fetch_add(n, std::memory_order_relaxed);
  int64_t limit = d.options.memory_limit_bytes;
  if (limit > 0 && before + n > limit) {
    d.in_use.fetch_sub(n, std::memory_order_relaxed);
    fail("{} is out of memory: a tensor of {} does not fit beside the {} living there (its limit is {})", device.name(),
         memory_size(n), memory_size(before), memory_size(limit));
  }
  return true;
}

void refund_cpu_device(Device device, size_t bytes) {
  cpu_devices[static_cast<size_t>(device.index)].in_use.fetch_sub(static_cast<int64_t>(bytes),
                                                                  std::memory_order_relaxed);
}

}  // namespace core
}  // namespace tandem
