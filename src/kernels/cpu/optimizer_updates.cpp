// Parameter updates, written so that the compiler vectorizes each loop (one pass over memory).
// They run with subnormal numbers flushed to zero (as TensorFlow runs its ops): a moment that
// decays toward zero (Adam's m and v where a weight's gradient is zero or tiny) otherwise passes
// through the subnormal range, where each operation costs the CPU a microcode assist. The mlp at
// batch 25 spent 78% of its step in adam_update so (perf), one tenth of its floor's speed.
// The formulas are kernels/elements.h's, one element at a time.
#include <xmmintrin.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/over_elements.h"
#include "kernels/elements.h"

namespace tandem::kernels::cpu {
namespace {
// Subnormal inputs read as zero (DAZ) and subnormal results written as zero (FTZ) while alive.
class SubnormalsFlushed {
 public:
  SubnormalsFlushed() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~SubnormalsFlushed() { _mm_setcsr(saved_); }
  SubnormalsFlushed(const SubnormalsFlushed&) = delete;
  SubnormalsFlushed& operator=(const SubnormalsFlushed&) = delete;

 private:
  unsigned saved_;
};
}  // namespace

TANDEM_VECTORIZE void sgd_update_loop(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum,
                                      bool nesterov) {
  SubnormalsFlushed flushed;
  if (velocity == nullptr || momentum == 0.0f) {
    for (int64_t i = 0; i < n; ++i) elements::sgd(w[i], g[i], lr);
  } else if (nesterov) {  // a loop per form, so that each vectorizes
    for (int64_t i = 0; i < n; ++i) elements::sgd_momentum(w[i], g[i], velocity[i], lr, momentum, true);
  } else {
    for (int64_t i = 0; i < n; ++i) elements::sgd_momentum(w[i], g[i], velocity[i], lr, momentum, false);
  }
}
void sgd_update(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum, bool nesterov) {
  over_elements(n, velocity && momentum != 0.0f ? 20 : 12, [&](int64_t i, int64_t count) {
    sgd_update_loop(w + i, g + i, velocity ? velocity + i : nullptr, count, lr, momentum, nesterov);
  });
}

TANDEM_VECTORIZE void adam_update_loop(float* w, const float* g, float* m, float* v, int64_t n, float alpha,
                                       float beta1, float beta2, float epsilon) {
  SubnormalsFlushed flushed;
  for (int64_t i = 0; i < n; ++i) elements::adam(w[i], g[i], m[i], v[i], alpha, beta1, beta2, epsilon);
}
void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                 float epsilon, int64_t step) {
  float alpha = elements::adam_alpha(lr, beta1, beta2, step);
  over_elements(n, 28, [&](int64_t i, int64_t count) {
    adam_update_loop(w + i, g + i, m + i, v + i, count, alpha, beta1, beta2, epsilon);
  });
}

TANDEM_VECTORIZE void rmsprop_update_loop(float* w, const float* g, float* mean_square, float* velocity, int64_t n,
                                          float lr, float rho, float momentum, float epsilon) {
  SubnormalsFlushed flushed;
  if (velocity == nullptr) {
    for (int64_t i = 0; i < n; ++i) elements::rmsprop(w[i], g[i], mean_square[i], nullptr, lr, rho, momentum, epsilon);
  } else {
    for (int64_t i = 0; i < n; ++i)
      elements::rmsprop(w[i], g[i], mean_square[i], velocity + i, lr, rho, momentum, epsilon);
  }
}
void rmsprop_update(float* w, const float* g, float* mean_square, float* velocity, int64_t n, float lr, float rho,
                    float momentum, float epsilon) {
  over_elements(n, velocity ? 28 : 20, [&](int64_t i, int64_t count) {
    rmsprop_update_loop(w + i, g + i, mean_square + i, velocity ? velocity + i : nullptr, count, lr, rho, momentum,
                        epsilon);
  });
}

TANDEM_VECTORIZE void adagrad_update_loop(float* w, const float* g, float* accumulator, int64_t n, float lr,
                                          float epsilon) {
  SubnormalsFlushed flushed;
  for (int64_t i = 0; i < n; ++i) elements::adagrad(w[i], g[i], accumulator[i], lr, epsilon);
}
void adagrad_update(float* w, const float* g, float* accumulator, int64_t n, float lr, float epsilon) {
  over_elements(
      n, 20, [&](int64_t i, int64_t count) { adagrad_update_loop(w + i, g + i, accumulator + i, count, lr, epsilon); });
}

}  // namespace tandem::kernels::cpu
