#pragma once
// What one replica keeps through TrainStep's steps: its tape, its gradient reducer and its
// gradient list (made once, reused every step).
#include <string>
#include <vector>

#include "distribute/gradient_reducer.h"
#include "tandem/autograd.h"
#include "tandem/distribute/train_step.h"

namespace tandem::distribute {

struct TrainStep::ReplicaState {
  ReplicaState(GradientReduction policy, std::vector<Tensor> sources_in)
      : reducer(policy, sources_in), sources(std::move(sources_in)), grads(sources.size()) {}
  GradientTape tape;
  GradientReducer reducer;
  std::vector<Tensor> sources, grads;
  std::string thread_name;  // the replica's row in a timeline
};

}  // namespace tandem::distribute
