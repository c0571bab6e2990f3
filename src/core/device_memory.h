#pragma once
// A device's memory, as core needs it to hold tensors there: allocate, free, and move bytes to
// and from the host. The CPU's is the pooled allocator (memory::allocate) and needs no entry;
// every other device kind registers one (a GPU runtime, the emulated test device). Kernels for
// the device are registered one layer up (kernels/backend.h).
#include <cstddef>

#include "tandem/tensor.h"

namespace tandem::core {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Each call names the device of the kind it is for (a GPU's index: its memory, its stream).
  virtual void* allocate(Device device, size_t bytes) = 0;  // never null (throws)
  virtual void deallocate(Device device, void* pointer, size_t bytes) = 0;
  // Done when they return: the host's bytes may be read, or reused.
  virtual void to_host(Device device, void* host, const void* from, size_t bytes) = 0;
  virtual void from_host(Device device, void* to, const void* host, size_t bytes) = 0;
  // Whether host code may read and write its addresses directly (Tensor::data). When not, core
  // goes through to_host / from_host, and Tensor::data on such a tensor fails.
  virtual bool host_accessible() const = 0;
  // Bytes from one place of this kind's memory to another (`to` on `device`, `from` on `source`:
  // the same device, or another of the kind: a GPU's peer copy, a copy between two logical GPUs of
  // one card, each with its own stream), and `count` copies of a `pattern_bytes` value from the
  // host laid end to end (fill, zeros). A device does both on itself, without the host; these
  // defaults, for a device that does not, go through the host.
  virtual void copy_within(Device device, void* to, Device source, const void* from, size_t bytes);
  virtual void fill(Device device, void* to, const void* pattern, size_t pattern_bytes, size_t count);
};

// Registers (or with null, removes) the memory of a device kind other than the CPU; done before
// any tensor lives there and not while another thread makes or frees tensors.
void register_device_memory(Device::Kind kind, DeviceMemory* memory);
// The registered memory of a kind, or null.
DeviceMemory* device_memory(Device::Kind kind);

// The logical CPU devices' accounts (devices.cpp): counts `bytes` made on a CPU device where it is
// counted (true), failing past its limit or for a device not made; refund when they are freed.
bool charge_cpu_device(Device device, size_t bytes);
void refund_cpu_device(Device device, size_t bytes);
// The threads of the calling thread's compute device (0: not set; the thread's setting holds).
int compute_device_threads();

}  // namespace tandem::core
