#pragma once
// Weight initializers by Keras name and arguments, drawing from a counter-based stream.
#include <map>
#include <string>

#include "tandem/random.h"
#include "tandem/tensor.h"

namespace tandem {

// An initializer as a layer option: a Keras name ("he_normal", "variance_scaling", ...) and its
// arguments as Keras writes them ({"scale": "2.0", "mode": "fan_in"}); a name alone converts.
struct InitializerSpec {
  std::string name;
  std::map<std::string, std::string> args;
  InitializerSpec(const char* n) : name(n) {}  // NOLINT: "he_normal" reads as an option value
  InitializerSpec(std::string n, std::map<std::string, std::string> a = {}) : name(std::move(n)), args(std::move(a)) {}
};

struct Initializer {
  enum class Kind {
    Zeros,
    Ones,
    GlorotUniform,
    GlorotNormal,
    HeNormal,
    HeUniform,
    LecunNormal,
    TruncatedNormal,
    RandomNormal,
    RandomUniform,
    VarianceScaling,
    Constant
  };
  enum class Mode { FanIn, FanOut, FanAvg };
  enum class Distribution { TruncatedNormal, UntruncatedNormal, Uniform };
  Kind kind = Kind::GlorotUniform;
  // Keras' defaults for the arguments of the kinds that take them.
  double mean = 0.0, stddev = 0.05, minval = -0.05, maxval = 0.05, value = 0.0, scale = 1.0;
  Mode mode = Mode::FanIn;
  Distribution distribution = Distribution::TruncatedNormal;
  // Parses a spec; an unknown name, argument or value is an error naming `owner` (the layer).
  static Initializer parse(const InitializerSpec& spec, const std::string& owner);
  // Fills `t` (fan_in, fan_out as Keras computes them for the variable's shape).
  void fill(Tensor& t, int64_t fan_in, int64_t fan_out, const Philox& rng) const;
};

}  // namespace tandem
