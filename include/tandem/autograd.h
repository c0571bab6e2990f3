#pragma once
// GradientTape: records the ops run while it is active on this thread, then computes gradients
// of a scalar with respect to watched tensors and trainable variables, as tf.GradientTape does.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem {

namespace autograd {
struct Node;
class SlotMap;
}  // namespace autograd

class GradientTape;

// Marks a tensor as a trainable variable, which every tape watches without being asked.
void mark_trainable(const Tensor& t, bool trainable = true);
bool is_trainable(const Tensor& t);

// While alive, no tape on this thread records (like tf.GradientTape.stop_recording / torch.no_grad).
class StopRecording {
 public:
  StopRecording();
  ~StopRecording();
  StopRecording(const StopRecording&) = delete;
  StopRecording& operator=(const StopRecording&) = delete;

 private:
  GradientTape* saved_;
};

// Keras' L1/L2 weight penalty (keras.regularizers.l1, l2, l1_l2): l1·Σ|w| + l2·Σw², added to the
// training loss. 0 and 0: none.
struct Regularizer {
  float l1 = 0.0f;
  float l2 = 0.0f;
  bool any() const { return l1 != 0.0f || l2 != 0.0f; }
};

// A named tensor owned by a layer (or by the user); trainable ones are watched by every GradientTape.
struct Variable {
  std::string name;  // "dense/kernel"
  Tensor value;
  bool trainable = true;    // given a gradient and updated by the optimizer: it learns and is not frozen
  bool frozen = false;      // its layer is frozen (Keras' trainable = False): it keeps its value in training
  bool learns = true;       // trainable unless frozen (false: a layer's own statistics, as batch normalization's)
  Regularizer regularizer;  // its layer's kernel_regularizer or bias_regularizer: fit adds its penalty
};

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& t);
  // Stops recording on this thread (leaving tf.GradientTape's `with` block), the innermost tape
  // recording again; gradient() still works. Called on the thread that made the tape.
  void end_recording();
  // d target / d source for each source; a source the target does not depend on gets zeros.
  std::vector<Tensor> gradient(const Tensor& target, std::span<const Tensor> sources);
  // d target / d variable, for model.trainable_variables() as Keras' tape.gradient takes it.
  std::vector<Tensor> gradient(const Tensor& target, std::span<Variable* const> variables);
  // Same, writing into `out` (one per source) so that a training loop allocates nothing. With
  // `ready`, out[i] is written as soon as backward has made it final (no op left to add to it),
  // and ready(i) called then, while the rest of backward is still to run.
  void gradient(const Tensor& target, std::span<const Tensor> sources, std::span<Tensor> out,
                const std::function<void(size_t source)>* ready = nullptr);
  // Backward from a non-scalar target, given the gradient flowing into it (tf.GradientTape's
  // output_gradients; a pipeline stage's backward starts from what the next stage sends):
  // d sum(target · output_gradient) / d source, written into `out` (one per source).
  void gradient(const Tensor& target, std::span<const Tensor> sources, std::span<Tensor> out,
                const Tensor& output_gradient);
  std::vector<Tensor> gradient(const Tensor& target, std::span<const Tensor> sources, const Tensor& output_gradient);
  // Forgets everything recorded and starts recording again; keeps its memory for reuse.
  void reset();

  // For ops: the tape recording on this thread, or null.
  static GradientTape* active();
  // For ops: slot of a tensor the tape tracks, or -1.
  int32_t slot_of(const Tensor& t);
  // For ops: records `node` as producing `output` (takes ownership of node).
  void record(autograd::Node* node, const Tensor& output);
  // For gradient functions: adds `grad` to the gradient of slot.
  void accumulate(int32_t slot, Tensor grad);

 private:
  friend class StopRecording;
  // From `seed` (ones for a scalar target when null).
  void backward(const Tensor& target, const Tensor* seed, const std::function<void(size_t node)>* after_node = nullptr);
  void gradient_from(const Tensor& target, const Tensor* seed, std::span<const Tensor> sources, std::span<Tensor> out,
                     const std::function<void(size_t source)>* ready);
  void clear();
  int32_t new_slot(uint64_t id);
  bool persistent_;
  bool used_ = false;
  GradientTape* previous_;
  std::vector<autograd::Node*> nodes_;
  std::vector<Tensor> grads_;
  std::vector<uint64_t> keys_;  // open-addressing map from tensor id to slot
  std::vector<int32_t> values_;
  int32_t slots_ = 0;
  std::vector<int64_t> first_use_;  // per source, for gradient(..., ready)
  std::vector<int32_t> source_slots_;
};

}  // namespace tandem
