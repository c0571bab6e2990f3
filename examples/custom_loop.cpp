// A custom training loop with GradientTape, as in TensorFlow: forward, loss, gradients, apply.
// Usage: custom_loop [epochs] [data_dir]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

int main(int argc, char** argv) try {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 1;
  auto mnist = data::load_dataset("mnist", {.data_dir = argc > 2 ? argv[2] : "", .flatten = true});

  Sequential model;
  model.add(Dense(128, "relu", {.input_shape = Shape{784}}));
  model.add(Dense(10));
  optimizers::Adam adam(1e-3f);
  Loss loss_fn = Loss::sparse_categorical_crossentropy(/*from_logits=*/true);
  std::vector<Variable*> variables = model.trainable_variables();
  std::vector<Tensor> weights;
  for (Variable* v : variables) weights.push_back(v->value);

  const int64_t batch = 64, n = mnist.train.x.dim(0);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total = 0.0;
    for (int64_t begin = 0; begin + batch <= n; begin += batch) {
      Tensor x = mnist.train.x.slice(begin, begin + batch), y = mnist.train.y.slice(begin, begin + batch);
      GradientTape tape;
      Tensor loss = ops::mean(loss_fn.per_sample(y, model(x, /*training=*/true)));
      std::vector<Tensor> grads = tape.gradient(loss, weights);
      adam.apply(variables, grads);
      total += loss.item();
    }
    std::printf("epoch %d: mean loss %.4f\n", epoch + 1, total / static_cast<double>(n / batch));
  }
  Tensor logits = model.predict(mnist.test.x);
  Metric accuracy(Metric::Kind::SparseCategoricalAccuracy, "accuracy");
  accuracy.update(mnist.test.y, logits);
  std::printf("Test accuracy: %.2f%%\n", 100.0 * accuracy.result());
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
