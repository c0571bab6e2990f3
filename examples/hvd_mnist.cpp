// The reference tutorial's Horovod recipe, in Tandem's Horovod-style API, on the tutorial's MNIST
// CNN: start it with `tandem launch -np 2 -- ./hvd_mnist [epochs] [data_dir] [checkpoint_dir]`
// (alone, it trains as one process). Each process:
//   1. initializes the facade (hvd::init);
//   2. pins itself by local rank: its share of the machine's cores;
//   3. reads its own shard of the training data;
//   4. scales the learning rate by the number of processes and wraps the optimizer in
//      hvd::DistributedOptimizer, which averages the gradients over the processes;
//   5. starts from rank 0's weights (BroadcastGlobalVariables), warms the rate up over the first
//      epoch and averages the epoch's metrics over the processes;
//   6. writes checkpoints on rank 0 only, so that workers do not overwrite each other's.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "tandem/hvd.h"
#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

int main(int argc, char** argv) try {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 2;
  std::string checkpoints = argc > 3 ? argv[3] : "";
  hvd::init();
  set_num_threads(std::max(1, usable_cores() / hvd::local_size()));
  auto mnist = data::load_dataset("mnist", {.data_dir = argc > 2 ? argv[2] : "", .channels = true});

  int64_t rows = mnist.train.x.dim(0);
  int64_t begin = rows * hvd::rank() / hvd::size(), end = rows * (hvd::rank() + 1) / hvd::size();
  Tensor x = mnist.train.x.slice(begin, end), y = mnist.train.y.slice(begin, end);

  Sequential model(SequentialOptions{.seed = 1});
  model.add(Conv2D(32, 3, {.activation = "relu", .input_shape = Shape{28, 28, 1}}));
  model.add(MaxPooling2D());
  model.add(Flatten());
  model.add(Dense(64, "relu"));
  model.add(Dense(10));
  if (hvd::rank() == 0) model.print_summary();

  float learning_rate = 0.001f * static_cast<float>(hvd::size());
  model.compile(hvd::DistributedOptimizer(std::make_unique<optimizers::Adam>(learning_rate)),
                Loss::sparse_categorical_crossentropy(/*from_logits=*/true), {"accuracy"});

  int64_t batch = 64;
  FitOptions options{.epochs = epochs, .batch_size = batch, .verbose = hvd::rank() == 0 ? 1 : 0};
  options.callbacks.push_back(std::make_shared<hvd::BroadcastGlobalVariables>(0));
  options.callbacks.push_back(std::make_shared<hvd::MetricAverage>());
  options.callbacks.push_back(
      std::make_shared<hvd::LearningRateWarmup>(learning_rate, 1.0, (x.dim(0) + batch - 1) / batch));
  if (hvd::rank() == 0 && !checkpoints.empty())
    options.callbacks.push_back(std::make_shared<ModelCheckpoint>(checkpoints + "/ckpt-{epoch}.safetensors"));
  model.fit(x, y, options);

  Logs test = model.evaluate(mnist.test.x, mnist.test.y);
  if (hvd::rank() == 0)
    std::printf("%d processes: test accuracy %.2f%%\n", hvd::size(), 100.0 * log_value(test, "accuracy"));
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
