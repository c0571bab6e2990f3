#include "tandem/initializers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
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
    {Initializer::Kind::VarianceScaling, "variance_scaling"},
    {Initializer::Kind::Constant, "constant"},
};

// A normal truncated at two standard deviations, redrawn (with the next counter) until inside.
float truncated_normal(const Philox& rng, uint64_t index) {
  for (uint64_t attempt = 0;; ++attempt) {
    float v = rng.normal(index + attempt * 0x100000000ull);
    if (std::fabs(v) <= 2.0f) return v;
  }
}
}  // namespace

Initializer Initializer::parse(const InitializerSpec& spec, const std::string& owner) {
  Initializer init;
  bool known = false;
  std::string accepted;
  for (auto [kind, n] : kNames) {
    if (spec.name == n) {
      init.kind = kind;
      known = true;
    }
    accepted += accepted.empty() ? "" : ", ";
    accepted += n;
  }
  if (!known) fail("{}: unknown initializer \"{}\"; expected one of: {}", owner, spec.name, accepted);
  for (const auto& [key, text] : spec.args) {
    auto number = [&, key = key, text = text]() {
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !std::isfinite(v))
        fail("{}: initializer {} argument \"{}\" is \"{}\", expected a finite number", owner, spec.name, key, text);
      return v;
    };
    auto choice = [&, key = key, text = text](std::initializer_list<const char*> options) {
      int i = 0;
      for (const char* o : options) {
        if (text == o) return i;
        ++i;
      }
      fail("{}: initializer {} argument \"{}\" is \"{}\", not one Tandem implements", owner, spec.name, key, text);
    };
    bool normal = init.kind == Kind::RandomNormal || init.kind == Kind::TruncatedNormal;
    if (normal && key == "mean") init.mean = number();
    else if (normal && key == "stddev") init.stddev = number();
    else if (init.kind == Kind::RandomUniform && key == "minval") init.minval = number();
    else if (init.kind == Kind::RandomUniform && key == "maxval") init.maxval = number();
    else if (init.kind == Kind::Constant && key == "value") init.value = number();
    else if (init.kind == Kind::VarianceScaling && key == "scale") init.scale = number();
    else if (init.kind == Kind::VarianceScaling && key == "mode")
      init.mode = static_cast<Mode>(choice({"fan_in", "fan_out", "fan_avg"}));
    else if (init.kind == Kind::VarianceScaling && key == "distribution")  // "normal": Keras 2's name for truncated
      init.distribution =
          static_cast<Distribution>(choice({"truncated_normal", "untruncated_normal", "uniform", "normal"}) % 3);
    else fail("{}: initializer {} takes no argument \"{}\" (given \"{}\")", owner, spec.name, key, text);
  }
  if (init.kind == Kind::VarianceScaling && !(init.scale > 0))
    fail("{}: initializer variance_scaling needs a positive scale, got {}", owner, init.scale);
  if (init.stddev < 0) fail("{}: initializer {} needs stddev >= 0, got {}", owner, spec.name, init.stddev);
  return init;
}

void Initializer::fill(Tensor& t, int64_t fan_in, int64_t fan_out, const Philox& rng) const {
  float* p = t.data<float>();
  int64_t n = t.numel();
  double in = static_cast<double>(std::max<int64_t>(fan_in, 1)),
         out = static_cast<double>(std::max<int64_t>(fan_out, 1));
  auto uniform = [&](double limit) {
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<float>((2.0 * rng.uniform(static_cast<uint64_t>(i)) - 1.0) * limit);
  };
  auto truncated = [&](double stddev) {
    // Keras scales the truncated normal so that its standard deviation is `stddev`.
    double s = stddev / 0.87962566103423978;
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(truncated_normal(rng, static_cast<uint64_t>(i)) * s);
  };
  switch (kind) {
    case Kind::Zeros:
      for (int64_t i = 0; i < n; ++i) p[i] = 0.0f;
      break;
    case Kind::Ones:
      for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
      break;
    case Kind::GlorotUniform: uniform(std::sqrt(6.0 / (in + out))); break;
    case Kind::GlorotNormal: truncated(std::sqrt(2.0 / (in + out))); break;
    case Kind::HeNormal: truncated(std::sqrt(2.0 / in)); break;
    case Kind::HeUniform: uniform(std::sqrt(6.0 / in)); break;
    case Kind::LecunNormal: truncated(std::sqrt(1.0 / in)); break;
    case Kind::TruncatedNormal:
      for (int64_t i = 0; i < n; ++i)
        p[i] = static_cast<float>(mean + stddev * truncated_normal(rng, static_cast<uint64_t>(i)));
      break;
    case Kind::RandomNormal:
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(mean + stddev * rng.normal(static_cast<uint64_t>(i)));
      break;
    case Kind::RandomUniform:
      for (int64_t i = 0; i < n; ++i)
        p[i] = static_cast<float>(minval + (maxval - minval) * rng.uniform(static_cast<uint64_t>(i)));
      break;
    case Kind::Constant:
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(value);
      break;
    case Kind::VarianceScaling: {
      double fan = mode == Mode::FanIn ? in : mode == Mode::FanOut ? out : (in + out) / 2.0;
      double variance = scale / std::max(1.0, fan);
      if (distribution == Distribution::Uniform) uniform(std::sqrt(3.0 * variance));
      else if (distribution == Distribution::TruncatedNormal) truncated(std::sqrt(variance));
      else
        for (int64_t i = 0; i < n; ++i)
          p[i] = static_cast<float>(std::sqrt(variance) * rng.normal(static_cast<uint64_t>(i)));
      break;
    }
  }
}

}  // namespace tandem
