#include <cmath>

#include "tandem/optimizers.h"

namespace tandem {

ExponentialDecay::ExponentialDecay(float initial_learning_rate, int64_t decay_steps, float decay_rate, bool staircase)
    : initial_(initial_learning_rate), rate_(decay_rate), steps_(decay_steps), staircase_(staircase) {
  if (decay_steps <= 0) fail("ExponentialDecay: decay_steps must be positive, got {}", decay_steps);
  if (!(decay_rate > 0.0f)) fail("ExponentialDecay: decay_rate must be positive, got {}", decay_rate);
}

float ExponentialDecay::operator()(int64_t step) const {
  double p = static_cast<double>(step) / static_cast<double>(steps_);
  if (staircase_) p = std::floor(p);
  return static_cast<float>(initial_ * std::pow(static_cast<double>(rate_), p));
}

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<float> values)
    : boundaries_(std::move(boundaries)), values_(std::move(values)) {
  if (values_.size() != boundaries_.size() + 1)
    fail("PiecewiseConstantDecay: {} boundaries need {} values, got {}", boundaries_.size(), boundaries_.size() + 1,
         values_.size());
  for (size_t i = 1; i < boundaries_.size(); ++i)
    if (boundaries_[i] <= boundaries_[i - 1])
      fail("PiecewiseConstantDecay: boundaries must increase, got {} after {}", boundaries_[i], boundaries_[i - 1]);
}

float PiecewiseConstantDecay::operator()(int64_t step) const {
  for (size_t i = 0; i < boundaries_.size(); ++i)
    if (step <= boundaries_[i]) return values_[i];
  return values_.back();
}

}  // namespace tandem
