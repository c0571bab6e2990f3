// Parameter updates, written so that the compiler vectorizes each loop (one pass over memory).
// They run with subnormal numbers flushed to zero (as TensorFlow runs its ops): a moment that
// decays toward zero (Adam's m and v where a weight's gradient is zero or tiny) otherwise passes
// through the subnormal range, where each operation costs the CPU a microcode assist. The mlp at
// batch 25 spent 78% of its step in adam_update so (perf), one tenth of its floor's speed.
#include <xmmintrin.h>

#include <cmath>

#include "kernels/cpu/kernels.h"

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
  if (momentum == 0.0f) {
    for (int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
    return;
  }
  // Keras: v = momentum·v - lr·g; w += v (plain) or w += momentum·v - lr·g (Nesterov).
  if (nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      float v = momentum * velocity[i] - lr * g[i];
      velocity[i] = v;
      w[i] += momentum * v - lr * g[i];
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      float v = momentum * velocity[i] - lr * g[i];
      velocity[i] = v;
      w[i] += v;
    }
  }
}
void sgd_update(float* w, const float* g, float* velocity, int64_t n, float lr, float momentum, bool nesterov) {
  core::vectorized([&] { sgd_update_loop(w, g, velocity, n, lr, momentum, nesterov); });
}

TANDEM_VECTORIZE void adam_update_loop(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                                       float beta2, float epsilon, int64_t step) {
  SubnormalsFlushed flushed;
  // Keras' form: the bias corrections fold into the step size, epsilon stays outside the sqrt.
  double t = static_cast<double>(step);
  float alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(beta2, t)) / (1.0 - std::pow(beta1, t)));
  float one_minus_b1 = 1.0f - beta1, one_minus_b2 = 1.0f - beta2;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float mi = m[i] + one_minus_b1 * (gi - m[i]);
    float vi = v[i] + one_minus_b2 * (gi * gi - v[i]);
    m[i] = mi;
    v[i] = vi;
    w[i] -= alpha * mi / (std::sqrt(vi) + epsilon);
  }
}
void adam_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                 float epsilon, int64_t step) {
  core::vectorized([&] { adam_update_loop(w, g, m, v, n, lr, beta1, beta2, epsilon, step); });
}

TANDEM_VECTORIZE void rmsprop_update_loop(float* w, const float* g, float* mean_square, float* velocity, int64_t n,
                                          float lr, float rho, float momentum, float epsilon) {
  SubnormalsFlushed flushed;
  for (int64_t i = 0; i < n; ++i) {
    float ms = rho * mean_square[i] + (1.0f - rho) * g[i] * g[i];
    mean_square[i] = ms;
    float step = lr * g[i] / (std::sqrt(ms) + epsilon);
    if (velocity) {
      float vel = momentum * velocity[i] + step;
      velocity[i] = vel;
      w[i] -= vel;
    } else {
      w[i] -= step;
    }
  }
}
void rmsprop_update(float* w, const float* g, float* mean_square, float* velocity, int64_t n, float lr, float rho,
                    float momentum, float epsilon) {
  core::vectorized([&] { rmsprop_update_loop(w, g, mean_square, velocity, n, lr, rho, momentum, epsilon); });
}

TANDEM_VECTORIZE void adagrad_update_loop(float* w, const float* g, float* accumulator, int64_t n, float lr,
                                          float epsilon) {
  SubnormalsFlushed flushed;
  for (int64_t i = 0; i < n; ++i) {
    float a = accumulator[i] + g[i] * g[i];
    accumulator[i] = a;
    w[i] -= lr * g[i] / (std::sqrt(a) + epsilon);
  }
}
void adagrad_update(float* w, const float* g, float* accumulator, int64_t n, float lr, float epsilon) {
  core::vectorized([&] { adagrad_update_loop(w, g, accumulator, n, lr, epsilon); });
}

}  // namespace tandem::kernels::cpu
