// Fast kernels against the naive references at sizes where blocking and vector paths engage.
#include <pthread.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "kernels/cpu/kernels.h"
#include "reference.h"
#include "tandem/autograd.h"
#include "tandem/ops.h"
#include "tandem/runtime.h"
#include "test_util.h"

namespace tandem {
namespace {

// The vector levels this host can run: plain x86-64 always, then AVX2 and AVX-512 where it has them.
std::vector<core::Isa> levels_here() {
  std::vector<core::Isa> levels{core::Isa::X86_64};
  if (core::host_isa() >= core::Isa::Avx2) levels.push_back(core::Isa::Avx2);
  if (core::host_isa() >= core::Isa::Avx512) levels.push_back(core::Isa::Avx512);
  return levels;
}

// One product cut into no chunks, and two cut into several (by rows, by columns).
TEST(Gemm, AllTransposesMatchNaive) {
  for (auto [m, k, n] : {std::array<int64_t, 3>{37, 129, 65}, std::array<int64_t, 3>{301, 171, 67},
                         std::array<int64_t, 3>{23, 171, 389}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = testing::random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
        Tensor b = testing::random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
        Tensor c = ops::matmul(a, b, ta, tb);
        auto ref = reference::matmul(testing::to_double(a), testing::to_double(b), m, k, n, ta, tb);
        EXPECT_TRUE(testing::all_close(c, ref, 1e-4, 1e-4))
            << m << "x" << k << "x" << n << " ta=" << ta << " tb=" << tb;
      }
}

// gemm_tn_ordered: C (+)= Aᵀ·B with each element one FMA chain over k in order. Against a naive
// double product, and bit for bit against that chain written out with std::fma, on shapes with
// row and column tails (m not a multiple of 6: tails of 1 to 5 rows; n not of 16 or of 8), strided
// operands, and added to C; at every vector level the host has (AVX-512, AVX2 and plain blocks:
// the same bits), and as dispatched.
TEST(Gemm, OrderedTransposedProductIsOneFmaChainPerElement) {
  std::vector<std::optional<core::Isa>> levels{std::nullopt};
  for (core::Isa level : levels_here()) levels.push_back(level);
  for (std::optional<core::Isa> level : levels)
    for (auto [m, n, k] :
         {std::array<int64_t, 3>{37, 70, 32}, std::array<int64_t, 3>{8, 160, 3}, std::array<int64_t, 3>{301, 10, 29},
          std::array<int64_t, 3>{4, 64, 0}, std::array<int64_t, 3>{11, 48, 5}, std::array<int64_t, 3>{3, 16, 7}})
      for (bool add : {false, true}) {
        int64_t lda = m + 5, ldb = n + 3, ldc = n + 7;
        std::vector<float> a(static_cast<size_t>(std::max<int64_t>(k, 1) * lda)),
            b(static_cast<size_t>(std::max<int64_t>(k, 1) * ldb));
        std::vector<float> c(static_cast<size_t>(m * ldc));
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
        for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i % 7) - 3.0f;
        std::vector<float> before = c;
        if (level) kernels::cpu::gemm_tn_ordered_at(*level, m, n, k, a.data(), lda, b.data(), ldb, add, c.data(), ldc);
        else kernels::cpu::gemm_tn_ordered(m, n, k, a.data(), lda, b.data(), ldb, add, c.data(), ldc);
        std::string at(level ? core::isa_name(*level) : "dispatched");
        int wrong = 0, far = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            float old = before[static_cast<size_t>(i * ldc + j)], got = c[static_cast<size_t>(i * ldc + j)];
            if (j >= n) {  // outside C: untouched
              wrong += got != old;
              continue;
            }
            float chain = 0.0f;
            double exact = add ? old : 0.0;
            for (int64_t kk = 0; kk < k; ++kk) {
              float x = a[static_cast<size_t>(kk * lda + i)], y = b[static_cast<size_t>(kk * ldb + j)];
              chain = std::fma(x, y, chain);
              exact += static_cast<double>(x) * y;
            }
            float want = add ? old + chain : chain;
            wrong += std::memcmp(&got, &want, sizeof(float)) != 0;
            far += std::abs(got - exact) > 1e-4 * (1.0 + std::abs(exact));
          }
        EXPECT_EQ(wrong, 0) << m << "x" << n << "x" << k << " add=" << add << " at " << at;
        EXPECT_EQ(far, 0) << m << "x" << n << "x" << k << " add=" << add << " at " << at;
      }
}

// gemm_ordered: C = A·op(B) with each element one FMA chain over k in order. Bit for bit against
// that chain written out with std::fma and close to a double product, on shapes with row tails (of
// blocks of 5 and 6 rows), column tails (not whole vectors; 5-, 4- and 3-vector blocks), k across
// its cache blocks of 64, k = 0, strided operands, and B as stored or transposed (laid out through
// 16 × 16 or 8 × 8 blocks and edges). C outside its n columns stays untouched. At every vector level
// the host has, and as dispatched.
TEST(Gemm, OrderedProductIsOneFmaChainPerElement) {
  std::vector<std::optional<core::Isa>> levels{std::nullopt};
  for (core::Isa level : levels_here()) levels.push_back(level);
  for (std::optional<core::Isa> level : levels)
    for (auto [m, n, k] :
         {std::array<int64_t, 3>{37, 70, 32}, std::array<int64_t, 3>{8, 160, 130}, std::array<int64_t, 3>{301, 10, 29},
          std::array<int64_t, 3>{4, 64, 0}, std::array<int64_t, 3>{11, 80, 5}, std::array<int64_t, 3>{3, 16, 7},
          std::array<int64_t, 3>{62, 200, 65}, std::array<int64_t, 3>{31, 96, 1}, std::array<int64_t, 3>{20, 33, 48}})
      for (bool tb : {false, true}) {
        int64_t lda = k + 3, ldb = (tb ? k : n) + 5, ldc = n + 7;
        std::vector<float> a(static_cast<size_t>(m * lda)),
            b(static_cast<size_t>(std::max<int64_t>(tb ? n : k, 1) * ldb));
        std::vector<float> c(static_cast<size_t>(m * ldc));
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
        for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i % 7) - 3.0f;
        std::vector<float> before = c;
        if (level) kernels::cpu::gemm_ordered_at(*level, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc);
        else kernels::cpu::gemm_ordered(tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc);
        std::string at(level ? core::isa_name(*level) : "dispatched");
        int wrong = 0, far = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            float got = c[static_cast<size_t>(i * ldc + j)];
            if (j >= n) {
              wrong += got != before[static_cast<size_t>(i * ldc + j)];
              continue;
            }
            float chain = 0.0f;
            double exact = 0.0;
            for (int64_t kk = 0; kk < k; ++kk) {
              float x = a[static_cast<size_t>(i * lda + kk)];
              float y = b[static_cast<size_t>(tb ? j * ldb + kk : kk * ldb + j)];
              chain = std::fma(x, y, chain);
              exact += static_cast<double>(x) * y;
            }
            wrong += std::memcmp(&got, &chain, sizeof(float)) != 0;
            far += std::abs(got - exact) > 1e-4 * (1.0 + std::abs(exact));
          }
        EXPECT_EQ(wrong, 0) << m << "x" << n << "x" << k << " tb=" << tb << " at " << at;
        EXPECT_EQ(far, 0) << m << "x" << n << "x" << k << " tb=" << tb << " at " << at;
      }
}

// A level above the host's is refused, not run.
TEST(Gemm, OrderedProductAtALevelTheHostLacksIsRefused) {
  if (core::host_isa() == core::Isa::Avx512) GTEST_SKIP() << "this CPU has every level (AVX-512)";
  std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4);
  EXPECT_TRUE(testing::throws_error(
      [&] { kernels::cpu::gemm_ordered_at(core::Isa::Avx512, false, 2, 2, 2, a.data(), 2, b.data(), 2, c.data(), 2); },
      {"vector level avx512 asked for, this CPU has"}));
}

TEST(Transpose, MatchesTheDefinitionOnBlocksAndEdges) {
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{16, 16}, {48, 32}, {37, 70}, {5, 3}, {16, 1}, {1, 40}, {8, 8}, {24, 13}, {9, 17}}) {
    int64_t ld = cols + 2;
    std::vector<float> m(static_cast<size_t>(rows * ld)), out(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i);
    kernels::cpu::transpose(m.data(), rows, cols, ld, out.data());
    int wrong = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        wrong += out[static_cast<size_t>(j * rows + i)] != m[static_cast<size_t>(i * ld + j)];
    EXPECT_EQ(wrong, 0) << rows << " x " << cols;
  }
}

// Deterministic training runs a replica's micro-batches as one batch, so an activation and its
// derivative must give each element the same bits wherever it falls in the array: in a vector
// lane or in the scalar tail (no multiply-add fused in one and not in the other).
TEST(Activations, EachElementHasTheSameBitsWhereverItFalls) {
  const int64_t rows = 40, cols = 70, n = rows * cols;
  std::vector<float> dy(n), y0(n), bias(cols);
  for (int64_t i = 0; i < n; ++i) {
    dy[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)));
    y0[static_cast<size_t>(i)] = static_cast<float>(0.9 * std::cos(0.7 * static_cast<double>(i)));
  }
  for (int64_t j = 0; j < cols; ++j) bias[static_cast<size_t>(j)] = 0.01f * static_cast<float>(j % 9);
  for (Activation act : {Activation::Linear, Activation::ReLU, Activation::ELU, Activation::SELU, Activation::Sigmoid,
                         Activation::Tanh, Activation::GELU, Activation::Softmax}) {
    std::vector<float> y = y0, dz(n);
    kernels::cpu::bias_activation(y.data(), bias.data(), rows, cols, act);
    kernels::cpu::activation_backward(dy.data(), y0.data(), y.data(), dz.data(), rows, cols, act);
    int wrong = 0;
    for (auto [from, to] : {std::pair<int64_t, int64_t>{1, 2}, {3, 40}, {7, 12}, {0, 33}, {5, 8}, {9, 13}}) {
      int64_t m = (to - from) * cols, at = from * cols;
      std::vector<float> part(y0.begin() + at, y0.begin() + at + m), dpart(static_cast<size_t>(m));
      kernels::cpu::bias_activation(part.data(), bias.data(), to - from, cols, act);
      kernels::cpu::activation_backward(dy.data() + at, y0.data() + at, part.data(), dpart.data(), to - from, cols,
                                        act);
      wrong += std::memcmp(part.data(), y.data() + at, static_cast<size_t>(m) * sizeof(float)) != 0;
      wrong += std::memcmp(dpart.data(), dz.data() + at, static_cast<size_t>(m) * sizeof(float)) != 0;
    }
    EXPECT_EQ(wrong, 0) << "activation " << static_cast<int>(act);
  }
}

TEST(Conv2d, LargerShapesMatchNaive) {
  Tensor x = testing::random_tensor({4, 28, 28, 3}, 3);
  Tensor k = testing::random_tensor({3, 3, 3, 32}, 4);
  Tensor b = testing::random_tensor({32}, 5);
  for (Padding p : {Padding::Valid, Padding::Same}) {
    Tensor y = ops::conv2d(x, k, b, 1, 1, p);
    auto g = reference::conv_geometry(4, 28, 28, 3, 3, 3, 32, 1, 1, p);
    auto bd = testing::to_double(b);
    EXPECT_TRUE(
        testing::all_close(y, reference::conv2d(testing::to_double(x), testing::to_double(k), &bd, g), 1e-4, 1e-4));
  }
}

TEST(Pool2d, LargerShapesMatchNaive) {
  Tensor x = testing::random_tensor({4, 26, 26, 32}, 6);
  auto g = reference::conv_geometry(4, 26, 26, 32, 2, 2, 32, 2, 2, Padding::Valid);
  EXPECT_TRUE(testing::all_close(ops::max_pool2d(x, 2, 2, 2, 2, Padding::Valid),
                                 reference::pool2d(testing::to_double(x), g, true), 0, 0));
  EXPECT_TRUE(testing::all_close(ops::avg_pool2d(x, 2, 2, 2, 2, Padding::Valid),
                                 reference::pool2d(testing::to_double(x), g, false), 1e-6, 1e-6));
}

TEST(Activations, WideRowsMatchNaiveAcrossTheRange) {
  // 1000 values from -20 to 20 exercise the vectorized exp's range reduction.
  Tensor x = testing::random_tensor({10, 100}, 7, -20.0f, 20.0f);
  for (Activation a : {Activation::ELU, Activation::SELU, Activation::Sigmoid, Activation::Tanh, Activation::Softmax,
                       Activation::GELU, Activation::ReLU})
    EXPECT_TRUE(
        testing::all_close(ops::activation(x, a), reference::activation(testing::to_double(x), 100, a), 1e-6, 2e-6))
        << activation_name(a);
}

// The convolution's and pooling's chunks (whole images) against the same kernels run image by
// image: outputs, input gradients and the weight gradients summed over images.
TEST(Conv2d, ChunkedBatchMatchesImageByImage) {
  const int64_t n = 11, h = 17, w = 15, c = 5, f = 12;
  auto s = kernels::conv2d_shape(n, h, w, c, 3, 3, f, 1, 1, Padding::Same);
  auto one = kernels::conv2d_shape(1, h, w, c, 3, 3, f, 1, 1, Padding::Same);
  ASSERT_GT(2.0 * n * s.oh * s.ow * f * 9 * c, 2.0e6) << "too small to be chunked";
  std::vector<float> x = testing::random_tensor({n, h, w, c}, 1).to_vector(),
                     k = testing::random_tensor({3, 3, c, f}, 2).to_vector(),
                     bias = testing::random_tensor({f}, 3).to_vector(),
                     dy = testing::random_tensor({n, s.oh, s.ow, f}, 4).to_vector();
  int64_t in_image = h * w * c, out_image = s.oh * s.ow * f;
  std::vector<float> y(static_cast<size_t>(n * out_image)), dx(x.size()), dk(k.size()), db(bias.size());
  kernels::cpu::conv2d_forward(s, x.data(), k.data(), bias.data(), y.data());
  kernels::cpu::conv2d_backward_data(s, dy.data(), k.data(), dx.data());
  kernels::cpu::conv2d_backward_weights(s, x.data(), dy.data(), dk.data(), db.data());
  std::vector<double> dk_sum(k.size()), db_sum(bias.size());
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> yi(static_cast<size_t>(out_image)), dxi(static_cast<size_t>(in_image)), dki(k.size()),
        dbi(bias.size());
    kernels::cpu::conv2d_forward(one, x.data() + i * in_image, k.data(), bias.data(), yi.data());
    kernels::cpu::conv2d_backward_data(one, dy.data() + i * out_image, k.data(), dxi.data());
    kernels::cpu::conv2d_backward_weights(one, x.data() + i * in_image, dy.data() + i * out_image, dki.data(),
                                          dbi.data());
    for (int64_t j = 0; j < out_image; ++j)
      ASSERT_EQ(y[static_cast<size_t>(i * out_image + j)], yi[static_cast<size_t>(j)]) << "image " << i;
    for (int64_t j = 0; j < in_image; ++j)
      ASSERT_EQ(dx[static_cast<size_t>(i * in_image + j)], dxi[static_cast<size_t>(j)]) << "image " << i;
    for (size_t j = 0; j < dk.size(); ++j) dk_sum[j] += dki[j];
    for (size_t j = 0; j < db.size(); ++j) db_sum[j] += dbi[j];
  }
  EXPECT_TRUE(testing::all_close(std::vector<double>(dk.begin(), dk.end()), dk_sum, 1e-4, 1e-4));
  EXPECT_TRUE(testing::all_close(std::vector<double>(db.begin(), db.end()), db_sum, 1e-4, 1e-4));
}

TEST(Pool2d, ChunkedBatchMatchesImageByImage) {
  const int64_t n = 13, h = 24, w = 24, c = 16;
  for (auto kind : {kernels::PoolKind::Max, kernels::PoolKind::Average}) {
    auto s = kernels::pool2d_shape(kind, n, h, w, c, 2, 2, 2, 2, Padding::Valid);
    auto one = kernels::pool2d_shape(kind, 1, h, w, c, 2, 2, 2, 2, Padding::Valid);
    ASSERT_GT(32.0 * static_cast<double>(n * s.oh * s.ow * c * 4), 2.0e6) << "too small to be chunked";
    std::vector<float> x = testing::random_tensor({n, h, w, c}, 5).to_vector(),
                       dy = testing::random_tensor({n, s.oh, s.ow, c}, 6).to_vector();
    int64_t in_image = h * w * c, out_image = s.oh * s.ow * c;
    std::vector<float> y(dy.size()), dx(x.size());
    std::vector<char> workspace(kernels::cpu::pool2d_workspace_bytes(s));
    kernels::cpu::pool2d_forward(s, x.data(), y.data(), workspace.data());
    kernels::cpu::pool2d_backward(s, dy.data(), workspace.data(), dx.data());
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> yi(static_cast<size_t>(out_image)), dxi(static_cast<size_t>(in_image));
      std::vector<char> wi(kernels::cpu::pool2d_workspace_bytes(one));
      kernels::cpu::pool2d_forward(one, x.data() + i * in_image, yi.data(), wi.data());
      kernels::cpu::pool2d_backward(one, dy.data() + i * out_image, wi.data(), dxi.data());
      for (int64_t j = 0; j < out_image; ++j)
        ASSERT_EQ(y[static_cast<size_t>(i * out_image + j)], yi[static_cast<size_t>(j)]) << "image " << i;
      for (int64_t j = 0; j < in_image; ++j)
        ASSERT_EQ(dx[static_cast<size_t>(i * in_image + j)], dxi[static_cast<size_t>(j)]) << "image " << i;
    }
  }
}

// Kernels' bits do not depend on how many threads ran them: 1, 2, 3 and 8 threads, on the calling
// thread and on a fresh one, give the same outputs and gradients of a chunked matrix product,
// convolution and max pooling.
TEST(Kernels, BitsDoNotDependOnTheThreadCount) {
  Tensor a = testing::random_tensor({301, 171}, 1), b = testing::random_tensor({171, 67}, 2);
  Tensor x = testing::random_tensor({11, 17, 15, 5}, 3), kernel = testing::random_tensor({3, 3, 5, 12}, 4);
  auto run = [&] {
    GradientTape tape;
    tape.watch(a);
    tape.watch(kernel);
    tape.watch(x);
    Tensor p = ops::matmul(a, b);
    Tensor y = ops::max_pool2d(ops::conv2d(x, kernel, Tensor(), 1, 1, Padding::Same), 2, 2, 2, 2, Padding::Valid);
    Tensor loss = ops::add(ops::sum(ops::mul(p, p)), ops::sum(ops::mul(y, y)));
    std::vector<float> out = p.to_vector(), more = y.to_vector();
    out.insert(out.end(), more.begin(), more.end());
    for (const Tensor& g : tape.gradient(loss, std::vector<Tensor>{a, kernel, x})) {
      more = g.to_vector();
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  };
  int saved = num_threads_setting();
  set_num_threads(1);
  std::vector<float> one = run();
  for (int threads : {2, 3, 8}) {
    set_num_threads(threads);
    EXPECT_EQ(run(), one) << threads << " threads";
  }
  set_num_threads(saved);
  std::vector<float> fresh;
  std::thread([&] {
    set_num_threads(2);
    fresh = run();
  }).join();
  EXPECT_EQ(fresh, one);
}

std::atomic<int64_t> signals_handled{0};
void count_signal(int) { signals_handled.fetch_add(1, std::memory_order_relaxed); }

// A signal handled while oneDNN runs (Python's SIGINT handler, a profiler's SIGPROF) must not
// corrupt memory: oneDNN 2.7's GEMM kernels point the stack pointer into the heap, and without the
// signals held over each call this aborts in free() within a few hundred products. A second thread
// sends SIGUSR1, which has a handler, to the thread that runs matrix products and convolutions.
TEST(Kernels, SignalsArrivingDuringKernelsCorruptNothing) {
  struct sigaction action {
  }, previous{};
  action.sa_handler = count_signal;
  sigaction(SIGUSR1, &action, &previous);
  Tensor a = testing::random_tensor({64, 300}, 1), b = testing::random_tensor({300, 256}, 2);
  Tensor x = testing::random_tensor({8, 14, 14, 4}, 3), kernel = testing::random_tensor({3, 3, 4, 8}, 4);
  std::vector<float> product = ops::matmul(a, b).to_vector();
  std::vector<float> conv = ops::conv2d(x, kernel, Tensor(), 1, 1, Padding::Same).to_vector();
  pthread_t target = pthread_self();
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    while (!stop.load()) {
      pthread_kill(target, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  int64_t before = signals_handled.load();
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> junk(1000 + i % 300, 1.0f);  // heap traffic next to oneDNN's buffers
    ASSERT_EQ(ops::matmul(a, b).to_vector(), product) << "product " << i;
    if (i % 10 == 0) ASSERT_EQ(ops::conv2d(x, kernel, Tensor(), 1, 1, Padding::Same).to_vector(), conv) << i;
  }
  stop = true;
  sender.join();
  sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_GT(signals_handled.load(), before) << "no signal reached the handler: the test tested nothing";
}

int process_threads() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.is_directory() ? 1 : 0;
  return n;
}

// At one thread no other thread is started: oneDNN never opens an OpenMP team of its own (a
// primitive made at more threads would, and its waits would spin on shared cores).
TEST(Runtime, OneThreadStartsNoOtherThread) {
  std::thread([] {}).join();  // a sanitizer's own background thread starts with the first thread
  int before = 0, during = 0;
  std::thread([&] {
    // Counted on the thread that runs the ops, before them: a thread of the process's start-up
    // that ends meanwhile (seen on a loaded CI host) is not taken for one the ops started.
    before = process_threads();
    set_num_threads(1);
    Tensor x = testing::random_tensor({16, 24, 24, 3}, 1), kernel = testing::random_tensor({3, 3, 3, 8}, 2);
    GradientTape tape;
    tape.watch(kernel);
    tape.watch(x);
    // Pooling first: its workspace size is asked for before any chunk runs.
    Tensor y = ops::conv2d(ops::max_pool2d(x, 2, 2, 2, 2, Padding::Valid), kernel, Tensor(), 1, 1, Padding::Same);
    Tensor p = ops::matmul(testing::random_tensor({64, 300}, 3), testing::random_tensor({300, 200}, 4));
    tape.gradient(ops::add(ops::sum(y), ops::sum(p)), std::vector<Tensor>{kernel, x});
    during = process_threads();
  }).join();
  EXPECT_LE(during, before) << "threads other than the one running the ops were started";
}

TEST(Runtime, ThreadCountsOutsideTheLimitAreRefusedNamingIt) {
  int saved = num_threads_setting();
  for (int bad : {-1, kMaxThreads + 1}) {
    try {
      set_num_threads(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("from 1 to 1024"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  set_num_threads(kMaxThreads);  // allowed: never more than the usable cores run at once
  EXPECT_EQ(num_threads(), kMaxThreads);
  set_num_threads(0);
  EXPECT_GE(num_threads(), 1);
  EXPECT_EQ(num_threads_setting(), 0);
  set_num_threads(saved);
  EXPECT_GE(usable_cores(), 1);
  EXPECT_GE(free_cores(), 1);
  EXPECT_LE(free_cores(), usable_cores());
}

}  // namespace
}  // namespace tandem
