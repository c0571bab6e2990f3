// Row-exact products (ops::RowExactProducts), which deterministic training needs to run a replica's
// micro-batches as one batch: under them dense's forward and its input gradient give every row the
// bits it has when its rows are multiplied alone, and the kernel and bias gradients taken from the
// kept products' rows (KernelProducts::rows, bias_gradient) are those of the rows alone.
#include <gtest/gtest.h>

#include <cstring>

#include "tandem/tandem.h"
#include "test_util.h"

namespace tandem {
namespace {

struct DenseRun {
  std::vector<float> y, dx, dbias;
  ops::KernelProducts kept;
};

// dense(x) with tanh, and the gradients of Σ y·w (w fixed per element of y), under row-exact
// products, with the kernel's gradient and the bias's left in the products.
DenseRun run_dense(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Tensor& w) {
  ops::RowExactProducts exact;
  GradientTape tape;
  tape.watch(x);
  tape.watch(kernel);
  tape.watch(bias);
  ops::DeferredKernelGradients deferred;
  deferred.defer(kernel, true);
  Tensor y = ops::dense(x, kernel, bias, Activation::Tanh, &deferred);
  Tensor loss = ops::sum(ops::mul(y, w));
  std::vector<Tensor> grads = tape.gradient(loss, std::vector<Tensor>{x});
  DenseRun out{y.to_vector(), grads[0].to_vector(), {}, deferred.take(kernel)};
  out.dbias = out.kept.bias_gradient(kernel.dim(1), Device::cpu()).to_vector();
  return out;
}

std::vector<float> rows_of(const std::vector<float>& all, int64_t from, int64_t to, int64_t width) {
  return {all.begin() + from * width, all.begin() + to * width};
}

TEST(RowExactProducts, EveryRowHasTheBitsOfItsRowsAlone) {
  const int64_t rows = 40, in = 150, units = 70;  // 70 columns: not whole vectors; 150: k across blocks
  Tensor x = testing::random_tensor({rows, in}, 1), kernel = testing::random_tensor({in, units}, 2, -0.2f, 0.2f),
         bias = testing::random_tensor({units}, 3), w = testing::random_tensor({rows, units}, 4);
  DenseRun all = run_dense(x, kernel, bias, w);
  for (auto [from, to] : {std::pair<int64_t, int64_t>{0, 40}, {7, 19}, {0, 1}, {33, 40}, {12, 12}}) {
    DenseRun part = run_dense(x.slice(from, to), kernel, bias, w.slice(from, to));
    EXPECT_EQ(rows_of(all.y, from, to, units), part.y) << "forward, rows " << from << "-" << to;
    EXPECT_EQ(rows_of(all.dx, from, to, in), part.dx) << "input gradient, rows " << from << "-" << to;
    EXPECT_EQ(all.kept.rows(from, to).bias_gradient(units, Device::cpu()).to_vector(), part.dbias)
        << "bias gradient, rows " << from << "-" << to;
    ops::KernelProducts mine = all.kept.rows(from, to);
    ASSERT_EQ(mine.xs.size(), 1u);
    EXPECT_EQ(mine.xs[0].to_vector(), part.kept.xs[0].to_vector());
    EXPECT_EQ(mine.dzs[0].to_vector(), part.kept.dzs[0].to_vector());
  }
  // The same values as the library's products, up to summation order.
  Tensor plain = ops::dense(x, kernel, bias, Activation::Tanh);
  EXPECT_TRUE(testing::all_close(plain, std::vector<double>(all.y.begin(), all.y.end()), 1e-5, 1e-5));
  EXPECT_EQ(all.dbias.size(), static_cast<size_t>(units));
}

// Outside the scope dense's products are the library's again, and a bias gradient left in the
// products is not also made by backward.
TEST(RowExactProducts, EndsWithItsScopeAndLeavesTheBiasGradientOnce) {
  EXPECT_FALSE(ops::row_exact_products());
  {
    ops::RowExactProducts exact;
    EXPECT_TRUE(ops::row_exact_products());
  }
  EXPECT_FALSE(ops::row_exact_products());
  Tensor x = testing::random_tensor({5, 6}, 1), kernel = testing::random_tensor({6, 3}, 2), bias = Tensor::zeros({3});
  GradientTape tape;
  tape.watch(kernel);
  tape.watch(bias);
  ops::DeferredKernelGradients deferred;
  deferred.defer(kernel, true);
  EXPECT_TRUE(deferred.defers_bias(kernel));
  Tensor loss = ops::sum(ops::dense(x, kernel, bias, Activation::Linear, &deferred));
  std::vector<Tensor> grads = tape.gradient(loss, std::vector<Tensor>{bias});
  EXPECT_EQ(grads[0].to_vector(), std::vector<float>(3, 0.0f)) << "backward summed the bias gradient itself";
  EXPECT_EQ(deferred.take(kernel).bias_gradient(3, Device::cpu()).to_vector(), std::vector<float>(3, 5.0f));
}

}  // namespace
}  // namespace tandem
