#include "tandem/layers.h"

namespace tandem::layers {

Dense::Dense(int64_t units, const std::string& activation, DenseOptions options)
    : Layer(options.name, options.input_shape),
      units_(units),
      activation_(parse_activation(activation, label())),
      options_(std::move(options)),
      kernel_init_(Initializer::parse(options_.kernel_initializer, label())),
      bias_init_(Initializer::parse(options_.bias_initializer, label())) {
  if (units <= 0) fail("{}: units must be positive, got {}", label(), units);
}

Shape Dense::do_build(const Shape& input_shape, uint64_t seed) {
  if (input_shape.rank() != 1)
    fail("{}: expects inputs of shape (None, features), got {}; add a Flatten layer before it", label(),
         input_shape.str_with_batch());
  int64_t in = input_shape[0];
  add_variable("kernel", {in, units_}, kernel_init_, in, units_, seed);
  if (options_.use_bias) add_variable("bias", {units_}, bias_init_, in, units_, seed);
  return Shape{units_};
}

Tensor Dense::call(const Tensor& x, const CallContext& ctx) {
  check_input(x);
  ops::PrecisionScope precision(precision_);
  return ops::dense(x, variables_[0].value, options_.use_bias ? variables_[1].value : Tensor(), activation_,
                    ctx.kernel_gradients);
}

bool Dense::stacks_rows() const { return precision_ == ops::Precision::Float32; }

}  // namespace tandem::layers
