#include "tandem/tensor.h"
#include "tandem/allocator.h"
#include "tandem/random.h"
#include "test_util.h"

namespace tandem {
namespace {

TEST(Shape, BasicsAndString) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.str(), "(2, 3, 4)");
  EXPECT_EQ(Shape{5}.str(), "(5,)");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_TRUE(testing::throws_error([] { Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}; }, {"rank 9", "maximum of 8"}));
  EXPECT_TRUE(testing::throws_error([] { Shape{2, -1}; }, {"dimension 1 is negative"}));
}

TEST(Tensor, FactoriesCarryDTypeAndDevice) {
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_EQ(t.dtype(), DType::Float32);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.numel(), 6);
  for (float v : t.to_vector()) EXPECT_EQ(v, 0.0f);
  Tensor f = Tensor::full({4}, 2.5f);
  EXPECT_EQ(f.to_vector(), std::vector<float>(4, 2.5f));
  EXPECT_TRUE(testing::throws_error(
      [] {
        Tensor::empty({2}, DType::Float32, Device{Device::Kind::CUDA, 0});
      },
      {"cuda:0", "not available"}));
  EXPECT_TRUE(testing::throws_error(
      [] {
        Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3});
      },
      {"holds 4 values, got 3"}));
}

TEST(Tensor, SliceAndReshapeAreViews) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector({4, 3}, v);
  Tensor rows = t.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.to_vector(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  rows.data<float>()[0] = 100.0f;  // writes through to t
  EXPECT_EQ(t.to_vector()[3], 100.0f);
  Tensor r = t.reshape({2, 6});
  EXPECT_EQ(r.to_vector()[3], 100.0f);
  EXPECT_TRUE(testing::throws_error([&] { t.reshape({5, 2}); }, {"(4, 3)", "(5, 2)"}));
  EXPECT_TRUE(testing::throws_error([&] { t.slice(2, 5); }, {"[2, 5)", "size 4"}));
}

TEST(Tensor, ColumnsAreAStridedView) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector({4, 3}, v);
  Tensor cols = t.columns(1, 3);
  EXPECT_EQ(cols.shape(), (Shape{4, 2}));
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.to_vector(), (std::vector<float>{1, 2, 4, 5, 7, 8, 10, 11}));
  EXPECT_EQ(cols.clone().to_vector(), cols.to_vector());
  cols.copy_from(Tensor::zeros({4, 2}));  // writes through to t's columns 1 and 2 only
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 0, 0, 3, 0, 0, 6, 0, 0, 9, 0, 0}));
  EXPECT_EQ(Tensor::from_vector({3}, std::vector<float>{1, 2, 3}).columns(1, 2).to_vector(), (std::vector<float>{2}));
  EXPECT_TRUE(testing::throws_error([&] { t.columns(2, 4); }, {"[2, 4)", "size 3"}));
}

TEST(Tensor, DataChecksTheDType) {
  Tensor t = Tensor::zeros({2}, DType::Int32);
  EXPECT_TRUE(testing::throws_error([&] { t.data<float>(); }, {"int32", "float32"}));
  EXPECT_TRUE(testing::throws_error([] { Tensor().shape(); }, {"before it was given a value"}));
}

TEST(Tensor, AstypeConverts) {
  Tensor t = Tensor::from_vector({3}, std::vector<int32_t>{1, -2, 7});
  EXPECT_EQ(t.astype(DType::Float32).to_vector(), (std::vector<float>{1, -2, 7}));
}

TEST(Allocator, ReusesFreedBlocks) {
  memory::release_cached();
  { Tensor warm = Tensor::empty({1000}); }
  uint64_t before = memory::stats().system_allocations;
  for (int i = 0; i < 100; ++i) Tensor t = Tensor::empty({1000});
  EXPECT_EQ(memory::stats().system_allocations, before);
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution.
  auto zero = Philox(0, 0).block(0);
  EXPECT_EQ(zero, (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  auto ones = Philox(~0ull, ~0ull).block(~0ull);
  EXPECT_EQ(ones, (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

TEST(Philox, UniformsIsTheSameStreamInBlocks) {
  Philox rng(42, 3);
  std::vector<float> bulk(13);
  rng.uniforms(5, 13, bulk.data());
  for (int i = 0; i < 13; ++i) EXPECT_EQ(bulk[i], rng.uniform(5 + i));
  // Long runs go sixteen blocks (64 values) at a time in vectors: every value as the scalar block
  // gives it, from an unaligned start, across a counter's 32-bit carry, with a scalar tail.
  for (uint64_t first : {uint64_t{7}, (uint64_t{1} << 34) - 130}) {
    std::vector<float> many(3 * 64 + 21);
    rng.uniforms(first, static_cast<int64_t>(many.size()), many.data());
    int wrong = 0;
    for (size_t i = 0; i < many.size(); ++i) wrong += many[i] != rng.uniform(first + i);
    EXPECT_EQ(wrong, 0) << "from " << first;
  }
  double sum = 0;
  for (int i = 0; i < 10000; ++i) sum += rng.uniform(i);
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace tandem
