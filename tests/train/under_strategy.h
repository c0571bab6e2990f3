#pragma once
// The training tests that compare strategies: a model made under a strategy named as
// make_strategy names them ("default": none), and the small classifier they train.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/distribute/strategy_registry.h"
#include "tandem/model.h"

namespace tandem::testing {

struct UnderStrategy {
  std::unique_ptr<distribute::Strategy> strategy;  // first: it outlives the model
  std::unique_ptr<Model> model;
};

inline UnderStrategy made_under(const std::string& name, const std::function<std::unique_ptr<Model>()>& make) {
  UnderStrategy out;
  if (name != "default") out.strategy = distribute::make_strategy(name, 1);
  std::optional<distribute::Strategy::Scope> scope;
  if (out.strategy) scope.emplace(out.strategy.get());
  out.model = make();
  return out;
}

// Dense(6, relu) on 5 features, then Dense(3, softmax); seed 2; not compiled.
inline std::unique_ptr<Model> small_classifier() {
  auto model = std::make_unique<Sequential>(SequentialOptions{.seed = 2});
  model->add(layers::Dense(6, "relu", {.input_shape = Shape{5}}));
  model->add(layers::Dense(3, "softmax"));
  return model;
}

inline std::vector<std::vector<float>> weights_of(Model& model) {
  std::vector<std::vector<float>> out;
  for (Variable* v : model.variables()) out.push_back(v->value.to_vector());
  return out;
}

}  // namespace tandem::testing
