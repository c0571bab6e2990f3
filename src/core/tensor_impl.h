#pragma once
// The insides of a Tensor, shared by the library's own files only.
#include <atomic>
#include <memory>

#include "tandem/allocator.h"
#include "tandem/tensor.h"

namespace tandem {

struct Storage : PoolAllocated {
  std::atomic<int32_t> refs{1};
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  bool charged = false;         // counted against its logical CPU device (core::charge_cpu_device)
  std::shared_ptr<void> owner;  // set: the memory is the owner's (Tensor::adopt), not the allocator's
};

// What an op attaches to a tensor it made, for the layers above core to read back (softmax's
// probabilities keep their logits this way); core only frees it with the tensor.
struct TensorNote : PoolAllocated {
  virtual ~TensorNote() = default;
};

struct TensorImpl : PoolAllocated {
  std::atomic<int32_t> refs{1};
  Storage* storage = nullptr;
  Shape shape;
  std::array<int64_t, Shape::kMaxRank> strides{};
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  Device device;
  uint64_t id = 0;
  bool trainable = false;  // watched by every GradientTape
  std::unique_ptr<TensorNote> note;
};

}  // namespace tandem
