// tandem_ps_task: the C++ API under ParameterServerStrategy, each task of a cluster running this
// same program (tests/distribute/parameter_server_test.cpp starts it under `tandem launch --ps P
// --workers W`). A dropout MLP with Adam trains 3 epochs on 73 random rows in batches of 24 (the
// last of 1 row), synchronously, and the chief saves the final weights to OUT.
//   tandem_ps_task alone OUT     one process, the default strategy
//   tandem_ps_task tensors OUT   fit on tensors: workers read each batch by position
//   tandem_ps_task dataset OUT   fit on a Dataset stream: the chief sends each batch's rows
//   tandem_ps_task skewed OUT    as tensors, but the workers' labels differ from the chief's
//   tandem_ps_task batchnorm OUT with a BatchNormalization layer (its moving statistics in the chief's model)
//   tandem_ps_task alone-batchnorm OUT   that model in one process
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/tandem.h"
#include "test_util.h"

using namespace tandem;

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tandem_ps_task alone|tensors|dataset|skewed|batchnorm|alone-batchnorm OUT\n");
    return 2;
  }
  std::string mode = argv[1], out = argv[2];
  const int64_t n = 73;
  Tensor x = tandem::testing::random_tensor({n, 6}, 5);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  std::unique_ptr<distribute::ParameterServerStrategy> strategy;
  bool alone = mode.starts_with("alone"), batchnorm = mode.ends_with("batchnorm");
  if (!alone)
    strategy = std::make_unique<distribute::ParameterServerStrategy>(
        distribute::ClusterSpec::from_environment(),
        distribute::ParameterServerOptions{.mode = distribute::PsMode::Synchronous});
  bool skew = mode == "skewed" && !strategy->extended().is_chief();
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i + (skew ? 1 : 0)) % 4);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));

  std::unique_ptr<Model> model;
  {
    std::optional<distribute::Strategy::Scope> scope;
    if (strategy) scope.emplace(strategy.get());
    model = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
    model->add(layers::Dense(16, "relu", {.input_shape = Shape{6}}));
    if (batchnorm) model->add(layers::BatchNormalization());
    model->add(layers::Dropout(0.3f));
    model->add(layers::Dense(4, "softmax"));
    model->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  }
  FitOptions options{.epochs = 3, .batch_size = 24, .shuffle = false, .verbose = 0};
  if (mode == "dataset") model->fit(data::Dataset::from_tensor_slices({x, y}).batch(24), options);
  else model->fit(x, y, options);
  if (!strategy || strategy->extended().is_chief()) model->save_weights(out);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
