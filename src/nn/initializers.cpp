#include "tandem/initializers.h"

#include <cmath>
#include <utility>

namespace tandem {
namespace {
constexpr std::pair<Initializer::Kind, const char*> kNames[] = {
    {Initializer::Kind::Zeros, "zeros"},
    {Initializer::Kind::Ones, "ones"},
    {Initializer::Kind::GlorotUniform, "glorot_uniform"},
    {Initializer::Kind::GlorotNormal, "glorot_normal"},
    {Initializer::Kind::HeNormal, "he_normal"},
    {Initializer::Kind::HeUniform, "he_uniform"},
    {Initializer::Kind::LecunNormal, "lecun_normal"},
    {Initializer::Kind::TruncatedNormal, "truncated_normal"},
    {Initializer::Kind::RandomNormal, "random_normal"},
    {Initializer::Kind::RandomUniform, "random_uniform"},
};

// A normal truncated at two standard deviations, redrawn (with the next counter) until inside.
float truncated_normal(const Philox& rng, uint64_t index) {
  for (uint64_t attempt = 0;; ++attempt) {
    float v = rng.normal(index + attempt * 0x100000000ull);
    if (std::fabs(v) <= 2.0f) return v;
  }
}
}  // namespace

Initializer Initializer::parse(const std::string& name, const std::string& owner) {
  std::string accepted;
  for (auto [kind, n] : kNames) {
    if (name == n) return Initializer{kind};
    accepted += accepted.empty() ? "" : ", ";
    accepted += n;
  }
  fail("{}: unknown initializer \"{}\"; expected one of: {}", owner, name, accepted);
}

void Initializer::fill(Tensor& t, int64_t fan_in, int64_t fan_out, const Philox& rng) const {
  float* p = t.data<float>();
  int64_t n = t.numel();
  double in = static_cast<double>(std::max<int64_t>(fan_in, 1)), out = static_cast<double>(std::max<int64_t>(fan_out, 1));
  auto uniform = [&](double limit) {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((2.0 * rng.uniform(static_cast<uint64_t>(i)) - 1.0) * limit);
  };
  auto truncated = [&](double stddev) {
    // Keras scales the truncated normal so that its standard deviation is `stddev`.
    double s = stddev / 0.87962566103423978;
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(truncated_normal(rng, static_cast<uint64_t>(i)) * s);
  };
  switch (kind) {
    case Kind::Zeros: for (int64_t i = 0; i < n; ++i) p[i] = 0.0f; break;
    case Kind::Ones: for (int64_t i = 0; i < n; ++i) p[i] = 1.0f; break;
    case Kind::GlorotUniform: uniform(std::sqrt(6.0 / (in + out))); break;
    case Kind::GlorotNormal: truncated(std::sqrt(2.0 / (in + out))); break;
    case Kind::HeNormal: truncated(std::sqrt(2.0 / in)); break;
    case Kind::HeUniform: uniform(std::sqrt(6.0 / in)); break;
    case Kind::LecunNormal: truncated(std::sqrt(1.0 / in)); break;
    case Kind::TruncatedNormal:
      for (int64_t i = 0; i < n; ++i) p[i] = 0.05f * truncated_normal(rng, static_cast<uint64_t>(i));
      break;
    case Kind::RandomNormal:
      for (int64_t i = 0; i < n; ++i) p[i] = 0.05f * rng.normal(static_cast<uint64_t>(i));
      break;
    case Kind::RandomUniform: uniform(0.05); break;
  }
}

}  // namespace tandem
