// A custom training loop under MirroredStrategy, as in tf.distribute's custom-loop tutorial:
// the dataset is distributed, strategy.run runs the step on every replica, the losses are
// reduced. Usage: custom_loop_mirrored [epochs] [data_dir]
#include <cstdio>
#include <cstdlib>

#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

int main(int argc, char** argv) try {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 1;
  auto mnist = data::load_dataset("mnist", {.data_dir = argc > 2 ? argv[2] : "", .flatten = true});
  const int64_t global_batch = 64;

  distribute::MirroredStrategy strategy;
  auto scope = strategy.scope();
  Sequential model;
  model.add(Dense(128, "relu", {.input_shape = Shape{784}}));
  model.add(Dense(10));
  optimizers::Adam optimizer(1e-3f);
  Loss loss_fn = Loss::sparse_categorical_crossentropy(/*from_logits=*/true);

  auto train_step = [&](const data::Element& batch) {
    GradientTape tape;
    Tensor logits = model(batch[0], /*training=*/true);
    Tensor loss = compute_average_loss(loss_fn.per_sample(batch[1], logits), global_batch);
    std::vector<Variable*> variables = model.trainable_variables();
    optimizer.apply(variables, tape.gradient(loss, variables));  // all-reduces the gradients
    return loss;
  };

  auto train =
      data::Dataset::from_tensor_slices({mnist.train.x, mnist.train.y}).shuffle(10000).batch(global_batch, true);
  auto distributed = strategy.distribute_dataset(train);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total = 0.0;
    int64_t steps = 0;
    auto batches = distributed.iterate(epoch);
    while (auto batch = batches.next()) {
      total += strategy.reduce(distribute::ReduceOp::Sum, strategy.run(train_step, *batch)).item();
      ++steps;
    }
    std::printf("epoch %d: mean loss %.4f\n", epoch + 1, total / static_cast<double>(steps));
  }
  Metric accuracy(Metric::Kind::SparseCategoricalAccuracy, "accuracy");
  accuracy.update(mnist.test.y, model.predict(mnist.test.x));
  std::printf("Test accuracy: %.2f%%\n", 100.0 * accuracy.result());
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
