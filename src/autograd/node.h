#pragma once
// A recorded op: it knows the slots of its inputs and turns the gradient of its output into
// gradients of those inputs. Subclasses live beside their op in src/ops/.
#include <array>

#include "tandem/allocator.h"
#include "tandem/autograd.h"

namespace tandem::autograd {

struct Node : PoolAllocated {
  virtual ~Node() = default;
  virtual void backward(GradientTape& tape, const Tensor& grad_output) = 0;
  int32_t output_slot = -1;
  std::array<int32_t, 4> input_slots{-1, -1, -1, -1};
  bool needs(int i) const { return input_slots[static_cast<size_t>(i)] >= 0; }
};

// If a tape is recording and any input is tracked, fills the node's input slots, records it
// and returns true; otherwise deletes nothing and returns false (the caller owns no node yet).
// Usage: if (auto* tape = tracking_tape({a, b})) { auto* n = new MyNode(...); record(tape, n, {a, b}, out); }
GradientTape* tracking_tape(std::initializer_list<const Tensor*> inputs);
void record(GradientTape* tape, Node* node, std::initializer_list<const Tensor*> inputs, const Tensor& output);

}  // namespace tandem::autograd
