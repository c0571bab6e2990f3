// A replica whose share of a short global batch is empty runs the model on 0 rows: every op a
// model uses gives a (0, ...) output and the variables get zero gradients.
#include "tandem/autograd.h"
#include "tandem/ops.h"
#include "test_util.h"

namespace tandem {
namespace {

float abs_sum(const Tensor& t) {
  float s = 0;
  for (float v : t.to_vector()) s += std::abs(v);
  return s;
}

TEST(EmptyBatch, ModelOpsRunOnZeroRowsWithZeroGradients) {
  Tensor kernel = testing::random_tensor({3, 3, 1, 4}, 1), bias = testing::random_tensor({4}, 2);
  Tensor w = testing::random_tensor({36, 5}, 3), b = testing::random_tensor({5}, 4);
  GradientTape tape;
  tape.watch(kernel);
  tape.watch(bias);
  tape.watch(w);
  tape.watch(b);
  Tensor x = Tensor::zeros({0, 8, 8, 1});
  Tensor h = ops::conv2d(x, kernel, bias, 1, 1, Padding::Valid, Activation::ReLU);
  EXPECT_EQ(h.shape(), (Shape{0, 6, 6, 4}));
  h = ops::max_pool2d(h, 2, 2, 2, 2, Padding::Valid);
  EXPECT_EQ(h.shape(), (Shape{0, 3, 3, 4}));
  EXPECT_EQ(ops::avg_pool2d(h, 3, 3, 3, 3, Padding::Valid).shape(), (Shape{0, 1, 1, 4}));
  Tensor logits = ops::dense(ops::reshape(h, {0, 36}), w, b, Activation::Linear);
  EXPECT_EQ(logits.shape(), (Shape{0, 5}));
  Tensor probabilities = ops::softmax(ops::dropout(logits, 0.5f, {}));
  Tensor labels = Tensor::from_vector({0}, std::span<const int32_t>());
  Tensor loss = ops::sum(ops::sparse_softmax_cross_entropy(logits, labels));
  loss = ops::add(loss, ops::sum(ops::mean_squared_error(probabilities, Tensor::zeros({0, 5}))));
  EXPECT_EQ(loss.item(), 0.0f);
  std::vector<Tensor> sources{kernel, bias, w, b};
  std::vector<Tensor> grads = tape.gradient(loss, sources);
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_EQ(grads[i].shape(), sources[i].shape());
    EXPECT_EQ(abs_sum(grads[i]), 0.0f) << "source " << i;
  }
}

}  // namespace
}  // namespace tandem
