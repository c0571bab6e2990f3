// The device memory seam's defaults (device_memory.h): moves within a device through the host,
// for a device that has no way of its own.
#include "core/device_memory.h"

#include <cstring>
#include <vector>

namespace tandem::core {

void DeviceMemory::copy_within(Device device, void* to, Device source, const void* from, size_t bytes) {
  std::vector<char> host(bytes);
  to_host(source, host.data(), from, bytes);
  from_host(device, to, host.data(), bytes);
}

void DeviceMemory::fill(Device device, void* to, const void* pattern, size_t pattern_bytes, size_t count) {
  std::vector<char> host(pattern_bytes * count);
  for (size_t i = 0; i < count; ++i) std::memcpy(host.data() + i * pattern_bytes, pattern, pattern_bytes);
  from_host(device, to, host.data(), host.size());
}

}  // namespace tandem::core
