// A small residual network on MNIST, written with Keras' functional API in C++ (the Python one:
// examples/resnet20.py): a convolution, two residual blocks whose shortcut joins with Add, global
// average pooling and 10 logits. Usage: residual_mnist [epochs] [data_dir]
#include <cstdio>
#include <cstdlib>

#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

// conv 3×3, batch normalization, ReLU, conv 3×3, batch normalization, + x, ReLU.
SymbolicTensor residual_block(const SymbolicTensor& x, int64_t filters) {
  Conv2DOptions same{.padding = "same", .use_bias = false};
  SymbolicTensor y = ReLU()(BatchNormalization()(Conv2D(filters, 3, same)(x)));
  y = BatchNormalization()(Conv2D(filters, 3, same)(y));
  return ReLU()(Add()({x, y}));
}

int main(int argc, char** argv) try {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 2;
  auto mnist = data::load_dataset("mnist", {.data_dir = argc > 2 ? argv[2] : "", .channels = true});

  SymbolicTensor image = Input({28, 28, 1});
  SymbolicTensor h = ReLU()(BatchNormalization()(Conv2D(16, 3, {.strides = 2, .use_bias = false})(image)));
  h = residual_block(residual_block(h, 16), 16);
  Functional model(image, Dense(10)(GlobalAveragePooling2D()(h)), {.name = "residual_mnist"});
  model.print_summary();

  model.compile(optimizers::Adam(0.003f), Loss::sparse_categorical_crossentropy(/*from_logits=*/true), {"accuracy"});
  model.fit(mnist.train.x, mnist.train.y, {.epochs = epochs, .batch_size = 128});
  Logs test = model.evaluate(mnist.test.x, mnist.test.y);
  std::printf("Test accuracy: %.2f%%\n", 100.0 * log_value(test, "accuracy"));
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
