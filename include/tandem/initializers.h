#pragma once
// Weight initializers by Keras name, drawing from a counter-based stream.
#include <string>

#include "tandem/random.h"
#include "tandem/tensor.h"

namespace tandem {

struct Initializer {
  enum class Kind { Zeros, Ones, GlorotUniform, GlorotNormal, HeNormal, HeUniform, LecunNormal, TruncatedNormal,
                    RandomNormal, RandomUniform };
  Kind kind = Kind::GlorotUniform;
  // Parses "glorot_uniform", "he_normal", "truncated_normal", "zeros", …; `owner` names the layer in errors.
  static Initializer parse(const std::string& name, const std::string& owner);
  // Fills `t` (fan_in, fan_out as Keras computes them for the variable's shape).
  void fill(Tensor& t, int64_t fan_in, int64_t fan_out, const Philox& rng) const;
};

}  // namespace tandem
