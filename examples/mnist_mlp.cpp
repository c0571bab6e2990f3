// The first reference tutorial's normal model: Dense(128, relu) → Dropout(0.2) → Dense(10, softmax),
// Adam, batch 25, 10 epochs on MNIST. Usage: mnist_mlp [epochs] [data_dir]
#include <cstdio>
#include <cstdlib>

#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

int main(int argc, char** argv) try {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 10;
  auto mnist = data::load_dataset("mnist", {.data_dir = argc > 2 ? argv[2] : "", .flatten = true});

  Sequential model;
  model.add(Dense(128, "relu", {.input_shape = Shape{784}}));
  model.add(Dropout(0.2f));
  model.add(Dense(10, "softmax"));
  model.print_summary();

  model.compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  model.fit(mnist.train.x, mnist.train.y, {.epochs = epochs, .batch_size = 25});
  Logs test = model.evaluate(mnist.test.x, mnist.test.y);
  std::printf("Test loss: %.4f\nTest accuracy: %.2f%%\n", log_value(test, "loss"), 100.0 * log_value(test, "accuracy"));
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
