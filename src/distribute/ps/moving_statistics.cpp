// Batch normalization's moving statistics under parameter servers (moving_statistics.h).
#include "distribute/ps/moving_statistics.h"

#include <algorithm>
#include <cmath>

#include "tandem/error.h"

namespace tandem::distribute::ps {

namespace {
int64_t item_floats(std::span<const layers::Layer::MovingStatistics> layers) {
  int64_t n = 0;
  for (const layers::Layer::MovingStatistics& m : layers) n += 2 * m.mean->numel() + 1;
  return n;
}
}  // namespace

std::vector<layers::Layer::MovingStatistics> moving_statistics_of(
    const std::vector<std::shared_ptr<layers::Layer>>& layers) {
  std::vector<layers::Layer::MovingStatistics> out;
  for (const auto& l : layers)
    if (std::optional<layers::Layer::MovingStatistics> m = l->moving_statistics()) out.push_back(*m);
  return out;
}

Tensor moving_statistics_item(const ops::DeferredMovingStatistics& step,
                              std::span<const layers::Layer::MovingStatistics> layers) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(item_floats(layers)));
  for (const layers::Layer::MovingStatistics& m : layers) {
    std::vector<double> sums = step.sums(*m.mean, m.mean->numel());
    double calls = sums.back();
    for (size_t j = 0; j + 1 < sums.size(); ++j) out.push_back(calls > 0 ? static_cast<float>(sums[j] / calls) : 0.0f);
    out.push_back(static_cast<float>(calls));
  }
  return Tensor::from_vector({static_cast<int64_t>(out.size())}, out);
}

MovingStatisticsSums::MovingStatisticsSums(std::vector<layers::Layer::MovingStatistics> layers)
    : layers_(std::move(layers)) {
  for (const layers::Layer::MovingStatistics& m : layers_)
    sums_.emplace_back(2 * static_cast<size_t>(m.mean->numel()) + 1, 0.0);
}

void MovingStatisticsSums::add(const Tensor& item, const std::string& from) {
  int64_t expected = item_floats(layers_);
  if (item.dtype() != DType::Float32 || !(item.shape() == Shape{expected}))
    fail(
        "ParameterServerStrategy: {}'s result carries batch normalization statistics {} {}, expected float32 [{}] "
        "(the chief's model's {} layer(s)): every task must build the same model",
        from, dtype_name(item.dtype()), item.shape().str(), expected, layers_.size());
  Tensor values = item.contiguous();
  const float* p = values.data<float>();
  for (std::vector<double>& sums : sums_) {
    size_t c = sums.size() / 2;
    double calls = p[2 * c];
    if (!(calls >= 0.0 && calls <= 1e9) || calls != std::floor(calls))
      fail("ParameterServerStrategy: {}'s result counts {} calls of a batch normalization layer, expected a count",
           from, calls);
    for (size_t j = 0; j < 2 * c; ++j) sums[j] += static_cast<double>(p[j]) * calls;
    sums.back() += calls;
    p += 2 * c + 1;
  }
}

void MovingStatisticsSums::move() {
  for (size_t i = 0; i < layers_.size(); ++i) {
    ops::DeferredMovingStatistics::move(*layers_[i].mean, *layers_[i].variance, sums_[i], layers_[i].momentum);
    std::fill(sums_[i].begin(), sums_[i].end(), 0.0);
  }
}

}  // namespace tandem::distribute::ps
