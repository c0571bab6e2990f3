// The fused ReLU convolution and max pooling (ops::conv2d_max_pool2d, and Conv2D followed by
// MaxPooling2D in a model): the same bits as the two ops, forward and every gradient, and the
// convolution's output not kept for backward.
#include <gtest/gtest.h>

#include <cstring>

#include "tandem/allocator.h"
#include "tandem/autograd.h"
#include "tandem/tandem.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Geometry {
  int64_t conv_stride;
  Padding conv_padding;
  int64_t pool, pool_stride;
  Padding pool_padding;
  bool bias;
};

// The output and the gradients of x (where `of_x`), the kernel and the bias of a weighted sum of
// it, fused or not (without x's gradient, a layer's first, the backward may skip x's).
std::vector<std::vector<float>> run(const Geometry& g, bool fused, bool of_x, const Tensor& x, const Tensor& kernel,
                                    const Tensor& bias) {
  GradientTape tape;
  if (of_x) tape.watch(x);
  tape.watch(kernel);
  if (g.bias) tape.watch(bias);
  Tensor b = g.bias ? bias : Tensor();
  Tensor y = fused ? ops::conv2d_max_pool2d(x, kernel, b, g.conv_stride, g.conv_stride, g.conv_padding, g.pool, g.pool,
                                            g.pool_stride, g.pool_stride, g.pool_padding)
                   : ops::max_pool2d(ops::conv2d(x, kernel, b, g.conv_stride, g.conv_stride, g.conv_padding,
                                                 tandem::Activation::ReLU),
                                     g.pool, g.pool, g.pool_stride, g.pool_stride, g.pool_padding);
  Tensor weights = testing::random_tensor(y.shape(), 7);
  Tensor loss = ops::sum(ops::mul(y, weights));
  std::vector<Tensor> sources{kernel};
  if (of_x) sources.push_back(x);
  if (g.bias) sources.push_back(bias);
  std::vector<std::vector<float>> out{y.to_vector()};
  for (const Tensor& d : tape.gradient(loss, sources)) out.push_back(d.to_vector());
  return out;
}

TEST(Conv2dMaxPool, TheSameBitsAsTheConvolutionThenThePool) {
  // 16 input channels, so that under mixed_bfloat16 the convolution's products are bf16 too; 1, so
  // that the valid convolutions run Tandem's own loops (kernels::cpu::conv2d_is_small), whose
  // backward reads the pooled gradient directly where 2 × 2 windows tile the output. The larger
  // batch is cut into 4 chunks of 2 or 3 images (the fused op computes chunk by chunk). The first
  // two geometries tile the convolution's output with 2 × 2 windows.
  for (auto [batch, channels] : {std::pair<int64_t, int64_t>{3, 16}, {10, 16}, {3, 1}, {10, 1}}) {
    Tensor x = testing::random_tensor({batch, 12, 10, channels}, 1);
    Tensor kernel = testing::random_tensor({3, 3, channels, 32}, 2, -0.3f, 0.3f);
    Tensor bias = testing::random_tensor({32}, 3, -0.2f, 0.2f);
    for (const char* policy : {"float32", "mixed_bfloat16"})
      for (Geometry g : {Geometry{1, Padding::Valid, 2, 2, Padding::Valid, true},
                         Geometry{1, Padding::Same, 2, 2, Padding::Same, false},
                         Geometry{2, Padding::Same, 3, 1, Padding::Same, true},
                         Geometry{1, Padding::Valid, 3, 2, Padding::Valid, true}}) {
        ops::PrecisionScope scope(std::string(policy) == "mixed_bfloat16" ? ops::Precision::MixedBFloat16
                                                                          : ops::Precision::Float32);
        for (bool of_x : {true, false}) {
          auto fused = run(g, true, of_x, x, kernel, bias), apart = run(g, false, of_x, x, kernel, bias);
          ASSERT_EQ(fused.size(), apart.size());
          for (size_t i = 0; i < fused.size(); ++i)
            EXPECT_TRUE(same_bits(fused[i], apart[i]))
                << "batch " << batch << ", " << channels << " channels, " << policy << ", pool " << g.pool << " stride "
                << g.pool_stride << (of_x ? "" : ", no gradient of x") << ": output/gradient #" << i;
        }
      }
  }
}

// A model's Conv2D with ReLU then MaxPooling2D runs as the fused op: the same output and
// gradients as its layers called one by one, with the convolution's output (here 4 × 26 × 26 ×
// 32 floats, 346 KB) no longer kept for backward.
TEST(Conv2dMaxPool, AModelsReluConvolutionAndMaxPoolingRunFused) {
  std::vector<std::shared_ptr<Layer>> model{
      std::make_shared<Conv2D>(32, 3, Conv2DOptions{.activation = "relu", .input_shape = Shape{28, 28, 1}}),
      std::make_shared<MaxPooling2D>()};
  Shape shape{28, 28, 1};
  for (auto& layer : model) shape = layer->build(shape, 5);
  Tensor x = testing::random_tensor({4, 28, 28, 1}, 4);
  CallContext ctx{.training = true};
  auto forward = [&](bool together, uint64_t& kept) {
    GradientTape tape;
    uint64_t before = memory::stats().bytes_in_use;
    Tensor y = together ? call_layers(model, x, ctx) : model[1]->call(model[0]->call(x, ctx), ctx);
    kept = memory::stats().bytes_in_use - before;
    std::vector<Variable*> variables;
    for (Variable& v : model[0]->variables()) variables.push_back(&v);
    std::vector<std::vector<float>> out{y.to_vector()};
    for (const Tensor& d : tape.gradient(ops::sum(y), std::span<Variable* const>(variables)))
      out.push_back(d.to_vector());
    return out;
  };
  uint64_t kept_fused = 0, kept_apart = 0;
  auto fused = forward(true, kept_fused), apart = forward(false, kept_apart);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(same_bits(fused[i], apart[i])) << i;
  uint64_t conv_output = 4 * 26 * 26 * 32 * sizeof(float);
  EXPECT_LE(kept_fused + conv_output, kept_apart) << "fused " << kept_fused << " bytes, apart " << kept_apart;
}

}  // namespace
}  // namespace tandem
