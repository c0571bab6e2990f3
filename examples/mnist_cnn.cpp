// The second reference tutorial's CNN: Conv2D(32, 3, relu) → MaxPooling2D → Flatten →
// Dense(64, relu) → Dense(10), Adam, on MNIST. Usage: mnist_cnn [epochs] [data_dir]
#include <cstdio>
#include <cstdlib>

#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

int main(int argc, char** argv) try {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 3;
  auto mnist = data::load_dataset("mnist", {.data_dir = argc > 2 ? argv[2] : "", .channels = true});

  Sequential model;
  model.add(Conv2D(32, 3, {.activation = "relu", .input_shape = Shape{28, 28, 1}}));
  model.add(MaxPooling2D());
  model.add(Flatten());
  model.add(Dense(64, "relu"));
  model.add(Dense(10));
  model.print_summary();

  model.compile(optimizers::Adam(), Loss::sparse_categorical_crossentropy(/*from_logits=*/true), {"accuracy"});
  model.fit(mnist.train.x, mnist.train.y, {.epochs = epochs, .batch_size = 64});
  Logs test = model.evaluate(mnist.test.x, mnist.test.y);
  std::printf("Test accuracy: %.2f%%\n", 100.0 * log_value(test, "accuracy"));
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
