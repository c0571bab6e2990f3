#pragma once
// The insides of a Tensor, shared by the library's own files only.
#include <atomic>

#include "tandem/allocator.h"
#include "tandem/tensor.h"

namespace tandem {

struct Storage : PoolAllocated {
  std::atomic<int32_t> refs{1};
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
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
  // Set by softmax: the logits it was computed from, so that a cross-entropy loss on the
  // probabilities can use the fused, numerically stable logits path (as Keras does).
  Tensor softmax_logits;
};

}  // namespace tandem
