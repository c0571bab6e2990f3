#include "tandem/layers.h"

namespace tandem::layers {

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer(options.name, options.input_shape), options_(std::move(options)) {
  if (!(options_.momentum >= 0.0f && options_.momentum <= 1.0f))
    fail("{}: momentum must be in [0, 1], got {}", label(), options_.momentum);
  if (!(options_.epsilon > 0.0f)) fail("{}: epsilon must be positive, got {}", label(), options_.epsilon);
}

Shape BatchNormalization::do_build(const Shape& input_shape, uint64_t seed) {
  if (input_shape.rank() < 1) fail("{}: needs inputs with a channel axis", label());
  int64_t c = input_shape[input_shape.rank() - 1];
  Initializer ones{Initializer::Kind::Ones}, zeros{Initializer::Kind::Zeros};
  add_variable("gamma", {c}, ones, c, c, seed);
  add_variable("beta", {c}, zeros, c, c, seed);
  add_variable("moving_mean", {c}, zeros, c, c, seed, false);
  add_variable("moving_variance", {c}, ones, c, c, seed, false);
  return input_shape;
}

Tensor BatchNormalization::call(const Tensor& x, const CallContext& ctx) {
  check_input(x);
  return ops::batch_norm(x, variables_[0].value, variables_[1].value, variables_[2].value, variables_[3].value,
                         options_.momentum, options_.epsilon, ctx.training && trainable(),
                         distribute::replica_context(), options_.synchronized, ctx.moving_statistics);
}

void BatchNormalization::call_parts(BatchParts& parts) {
  if (!trainable()) return Layer::call_parts(parts);  // frozen: inference mode, each part alone
  std::vector<Tensor> gammas, betas;
  for (size_t i = 0; i < parts.h.size(); ++i) {
    check_input(parts.h[i]);
    parts.use_part(i);
    gammas.push_back(variables_[0].value);
    betas.push_back(variables_[1].value);
  }
  parts.h = ops::batch_norm_parts(parts.h, gammas, betas, variables_[2].value, variables_[3].value, options_.momentum,
                                  options_.epsilon, options_.synchronized, parts.gather, pending_);
}

void BatchNormalization::finish_parts() {
  if (auto pending = std::move(pending_)) pending->finish();
}

}  // namespace tandem::layers
