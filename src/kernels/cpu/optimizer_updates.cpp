// Parameter updates, written so that the compiler vectorizes each loop (one pass over memory).
// They run with subnormal numbers flushed to zero (as TensorFlow runs its ops): a moment that
// decays toward zero (Adam's m and v where a weight's gradient is zero or tiny) otherwise passes
// through the subnormal range, where each operation costs the CPU a microcode assist. The mlp at
// batch 25 spent 78% of its step in adam_update so (perf), one tenth of its floor's speed.
#include <xmmintrin.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/kernels.h"

namespace tandem::kernels::cpu {
namespace {
// Runs loop(begin, count) over [0, n) in parts of whole cache lines, on the op's intra-op threads
// when the arrays are large enough to pay for the hand-off. Each element is updated alone, so the
// bits do not depend on how it is cut. `bytes` is what one element reads and writes: the work
// counted per byte, as the update runs at memory speed (a 28-byte Adam element ~0.4 ns on one
// core, as long as ~30 multiply-adds of a product). The cnn's Adam (347,146 parameters) took 14% of
// a 2-thread step on one thread.
template <class Loop>
void over_elements(int64_t n, int bytes, const Loop& loop) {
  constexpr int64_t kLine = 16;  // floats in a 64-byte cache line: no two threads write one line
  double work = static_cast<double>(n) * bytes;
  int64_t chunks = core::split_chunks(n, work, kLine);
  core::parallel_for(chunks, work, [&](int64_t c) {
    core::Range r = core::chunk_range(n, chunks, c, kLine);
    if (r.end > r.begin) core::vectorized([&] { loop(r.begin, r.end - r.begin); });
  });
}

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
  over_elements(n, velocity && momentum != 0.0f ? 20 : 12, [&](int64_t i, int64_t count) {
    sgd_update_loop(w + i, g + i, velocity ? velocity + i : nullptr, count, lr, momentum, nesterov);
  });
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
  over_elements(n, 28, [&](int64_t i, int64_t count) {
    adam_update_loop(w + i, g + i, m + i, v + i, count, lr, beta1, beta2, epsilon, step);
  });
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
  over_elements(n, velocity ? 28 : 20, [&](int64_t i, int64_t count) {
    rmsprop_update_loop(w + i, g + i, mean_square + i, velocity ? velocity + i : nullptr, count, lr, rho, momentum,
                        epsilon);
  });
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
  over_elements(
      n, 20, [&](int64_t i, int64_t count) { adagrad_update_loop(w + i, g + i, accumulator + i, count, lr, epsilon); });
}

}  // namespace tandem::kernels::cpu
