// One replica per process (tandem/distribute/per_process.h): the passes summed, reduced over the
// processes by the GradientReducer, scaled.
#include "tandem/distribute/per_process.h"

#include "distribute/gradient_reducer.h"

namespace tandem::distribute {

PerProcessUpdate::PerProcessUpdate(std::function<Communicator&()> processes, PerProcessOptions options)
    : processes_(std::move(processes)), options_(std::move(options)) {
  if (options_.backward_passes_per_step < 1)
    fail("{}: backward_passes_per_step must be at least 1, got {}", options_.name, options_.backward_passes_per_step);
  if (options_.bucket_bytes < 0)
    fail("{}: the fusion buffer size must be 0 (a buffer per gradient) or positive, got {} bytes", options_.name,
         options_.bucket_bytes);
}

PerProcessUpdate::~PerProcessUpdate() = default;

// Every pass of a step gives float32 gradients of the variables' shapes, as the first pass did.
void PerProcessUpdate::check(std::span<Variable* const> variables, std::span<const Tensor> gradients) {
  const std::string& who = options_.name;
  if (variables.size() != gradients.size())
    fail("{}: {} variables but {} gradients", who, variables.size(), gradients.size());
  if (passes_ > 0 && gradients.size() != shapes_.size())
    fail("{}: pass {} of a step gave {} gradients, the first {}", who, passes_ + 1, gradients.size(), shapes_.size());
  bool same = gradients.size() == shapes_.size();
  for (size_t i = 0; i < gradients.size(); ++i) {
    const Tensor& g = gradients[i];
    const Variable& v = *variables[i];
    if (g.dtype() != DType::Float32)
      fail("{}: the gradient of \"{}\" is {}; only float32 gradients are reduced", who, v.name, dtype_name(g.dtype()));
    if (!(g.shape() == v.value.shape()))
      fail("{}: the gradient of \"{}\" has shape {}, the variable {}", who, v.name, g.shape().str(),
           v.value.shape().str());
    same = same && g.shape() == shapes_[i];
  }
  if (same && reducer_ != nullptr) return;
  if (passes_ > 0) fail("{}: pass {} of a step gave gradients of other shapes than the first", who, passes_ + 1);
  shapes_.clear();
  std::vector<Tensor> sources;
  for (size_t i = 0; i < gradients.size(); ++i) {
    shapes_.push_back(gradients[i].shape());
    sources.push_back(variables[i]->value);
  }
  reducer_ = std::make_unique<GradientReducer>(GradientReduction{.kind = GradientReduction::Kind::Bucketed,
                                                                 .bucket_bytes = options_.bucket_bytes,
                                                                 .compression = options_.compression},
                                               std::move(sources));
}

const std::vector<Tensor>* PerProcessUpdate::reduce(std::span<Variable* const> variables,
                                                    std::span<const Tensor> gradients) {
  const ReplicaContext* replica = replica_context();
  if (replica != nullptr && replica->num_replicas > 1)
    fail(
        "{} averages over processes, one replica each; under a strategy with {} replicas use "
        "MultiWorkerMirroredStrategy instead",
        options_.name, replica->num_replicas);
  check(variables, gradients);
  Communicator& processes = processes_();
  if (passes_ == 0) {
    split_.even(processes.size(), processes.size(), processes.size());  // a part per process
    reducer_->begin(&processes, split_, processes.rank());
  }
  pass_.assign(gradients.begin(), gradients.end());
  reducer_->add(passes_, pass_);
  if (++passes_ < options_.backward_passes_per_step) return nullptr;
  passes_ = 0;
  std::span<const Tensor> sums = reducer_->finish();
  reduced_.assign(sums.begin(), sums.end());
  float scale = 1.0f;
  if (options_.mean) scale /= static_cast<float>(processes.size());
  if (options_.average_aggregated_gradients) scale /= static_cast<float>(options_.backward_passes_per_step);
  if (scale != 1.0f)
    for (Tensor& t : reduced_) {
      float* p = t.data<float>();
      for (int64_t k = 0, n = t.numel(); k < n; ++k) p[k] *= scale;
    }
  return &reduced_;
}

void PerProcessUpdate::apply(Optimizer& optimizer, std::span<Variable* const> variables,
                             std::span<const Tensor> gradients) {
  if (const std::vector<Tensor>* reduced = reduce(variables, gradients)) optimizer.apply_here(variables, *reduced);
}

void PerProcessUpdate::apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                                     std::span<const Tensor> reduced) {
  optimizer.apply_here(variables, reduced);
}

}  // namespace tandem::distribute
