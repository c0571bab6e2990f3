#pragma once
// What one replica keeps through TrainStep's steps: its tape, its gradient reducer and its
// gradient list (made once, reused every step).
#include <string>
#include <vector>

#include "distribute/gradient_reducer.h"
#include "tandem/autograd.h"
#include "tandem/distribute/train_step.h"
#include "tandem/ops.h"

namespace tandem::distribute {

struct TrainStep::ReplicaState {
  // as_products: the sources whose gradients backward defers as dense's products (empty: none).
  // bias_of: for a stacked step (compute_parts_stacked), source i is the bias of the Dense whose
  // kernel is source bias_of[i] (else -1), its gradient taken from the kept products (empty: none).
  ReplicaState(GradientReduction policy, std::vector<Tensor> sources_in, std::vector<bool> as_products_in,
               std::vector<int> bias_of_in = {})
      : reducer(policy, sources_in, as_products_in),
        sources(std::move(sources_in)),
        grads(sources.size()),
        as_products(std::move(as_products_in)),
        bias_of(std::move(bias_of_in)) {
    for (size_t i = 0; i < sources.size(); ++i)
      if ((as_products.empty() || !as_products[i]) && (bias_of.empty() || bias_of[i] < 0)) {
        tape_sources.push_back(sources[i]);
        tape_of.push_back(i);
      }
    tape_grads.resize(tape_sources.size());
    if (tape_sources.size() < sources.size()) products.resize(sources.size());
  }
  bool defers() const { return !products.empty(); }
  GradientTape tape;
  GradientReducer reducer;
  std::vector<Tensor> sources, grads;
  // Deterministic steps: the Dense kernels' gradients come as their products (ops::KernelProducts,
  // summed tile by tile in the reduction), the other sources' from the tape.
  std::vector<bool> as_products;
  std::vector<int> bias_of;
  std::vector<Tensor> tape_sources, tape_grads;
  std::vector<size_t> tape_of;  // tape source j is source tape_of[j]
  std::vector<ops::KernelProducts> products;
  std::string thread_name;  // the replica's row in a timeline
};

}  // namespace tandem::distribute
