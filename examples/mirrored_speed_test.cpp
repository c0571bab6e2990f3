// The first reference tutorial's experiment: the same MNIST MLP trained normally and under
// MirroredStrategy (10 epochs, batch 25), each timed. Usage: mirrored_speed_test [epochs] [data_dir]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tandem/tandem.h"

using namespace tandem;
using namespace tandem::layers;

std::unique_ptr<Sequential> make_model() {
  auto model = std::make_unique<Sequential>();
  model->add(Dense(128, "relu", {.input_shape = Shape{784}}));
  model->add(Dropout(0.2f));
  model->add(Dense(10, "softmax"));
  model->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"sparse_categorical_accuracy"});
  return model;
}

double timed_fit(Sequential& model, const data::Split& train, int epochs) {
  auto start = std::chrono::steady_clock::now();
  model.fit(train.x, train.y, {.epochs = epochs, .batch_size = 25});
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int main(int argc, char** argv) try {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 10;
  auto mnist = data::load_dataset("mnist", {.data_dir = argc > 2 ? argv[2] : "", .flatten = true});

  auto model_normal = make_model();

  distribute::MirroredStrategy distribute;  // one replica per core
  std::printf("Number of devices: %d\n", distribute.num_replicas_in_sync());
  std::unique_ptr<Sequential> model_dis;
  {
    auto scope = distribute.scope();
    model_dis = make_model();
  }

  double distributed = timed_fit(*model_dis, mnist.train, epochs);
  std::printf("Time taken by distributed training : %.2f s\n", distributed);
  double normal = timed_fit(*model_normal, mnist.train, epochs);
  std::printf("Time taken by normal training : %.2f s\n", normal);
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
