// CIFAR-10, CSV and .npy loaders on small hand-made files, good and broken.
#include <filesystem>

#include "tandem/data/loaders.h"
#include "tandem/io.h"
#include "test_util.h"

namespace tandem {
namespace {

std::string cifar_record(uint8_t label, uint8_t base) {
  std::string r(1 + 3072, '\0');
  r[0] = static_cast<char>(label);
  for (int i = 0; i < 3072; ++i)
    r[static_cast<size_t>(1 + i)] = static_cast<char>((base + i / 1024 * 100 + i % 7) & 0xFF);
  return r;
}

TEST(Cifar10, RecordsBecomeChannelsLastImages) {
  data::Split s = data::parse_cifar10(cifar_record(3, 10) + cifar_record(9, 0), "mem");
  EXPECT_EQ(s.x.shape(), (Shape{2, 32, 32, 3}));
  EXPECT_EQ(s.y.data<int32_t>()[0], 3);
  EXPECT_EQ(s.y.data<int32_t>()[1], 9);
  // Pixel (0, 1) of image 0: red byte 1, green byte 1025, blue byte 2049.
  EXPECT_FLOAT_EQ(s.x.data<float>()[3 + 0], (10 + 1) / 255.0f);
  EXPECT_FLOAT_EQ(s.x.data<float>()[3 + 1], (10 + 100 + 1025 % 7) / 255.0f);
  EXPECT_FLOAT_EQ(s.x.data<float>()[3 + 2], (10 + 200 + 2049 % 7) / 255.0f);
}

TEST(Cifar10, BrokenFilesAndLookup) {
  EXPECT_TRUE(testing::throws_error([] { data::parse_cifar10(cifar_record(1, 0) + "abc", "f.bin"); },
                                    {"f.bin", "truncated at byte offset 3076", "3 of its 3073"}));
  EXPECT_TRUE(testing::throws_error([] { data::parse_cifar10(cifar_record(1, 0) + cifar_record(10, 0), "f.bin"); },
                                    {"f.bin", "byte offset 3073", "label 10"}));
  EXPECT_TRUE(testing::throws_error([] { data::parse_cifar10("", "f.bin"); }, {"empty"}));
  testing::TempDir dir;
  EXPECT_TRUE(
      testing::throws_error([&] { data::load_cifar10(dir.path()); }, {dir.path() + "/cifar10", "data_batch_1.bin"}));
  std::filesystem::create_directories(dir.file("cifar10"));
  for (int i = 1; i <= 5; ++i)
    io::write_file_atomically(dir.file(fmt::format("cifar10/data_batch_{}.bin", i)),
                              cifar_record(static_cast<uint8_t>(i), 0));
  io::write_file_atomically(dir.file("cifar10/test_batch.bin"), cifar_record(0, 0));
  auto d = data::load_cifar10(dir.path());
  EXPECT_EQ(d.train.x.dim(0), 5);
  EXPECT_EQ(d.train.y.data<int32_t>()[4], 5);
  EXPECT_EQ(d.test.x.dim(0), 1);
}

TEST(Csv, HeaderDetectionQuotesAndValues) {
  auto t = data::parse_csv("a,\"b,c\",d\n1,2.5,-3e2\r\n\n4,5,6\n", "t.csv");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"a", "b,c", "d"}));
  EXPECT_EQ(t.values.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.values.to_vector(), (std::vector<float>{1, 2.5f, -300, 4, 5, 6}));
  auto n = data::parse_csv("1;2\n3;4", "n.csv", {.delimiter = ';'});
  EXPECT_EQ(n.columns, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(n.values.to_vector(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Csv, BrokenFilesNameLineAndOffset) {
  EXPECT_TRUE(testing::throws_error([] { data::parse_csv("a,b\n1,2\n3\n", "t.csv"); },
                                    {"t.csv", "line 3", "byte offset 8", "1 fields, expected 2"}));
  EXPECT_TRUE(testing::throws_error([] { data::parse_csv("a,b\n1,x2\n", "t.csv"); },
                                    {"line 2", "byte offset 6", "column \"b\"", "\"x2\" is not a number"}));
  EXPECT_TRUE(
      testing::throws_error([] { data::parse_csv("a,b\n1,\"2\n", "t.csv"); }, {"quoted field is never closed"}));
  EXPECT_TRUE(testing::throws_error([] { data::parse_csv("", "t.csv"); }, {"holds no rows"}));
  EXPECT_TRUE(testing::throws_error([] { data::parse_csv("a,b\n1,1e999\n", "t.csv"); }, {"\"1e999\" is not a number"}));
  EXPECT_TRUE(
      testing::throws_error([] { data::read_csv("/nonexistent/x.csv"); }, {"cannot open", "/nonexistent/x.csv"}));
}

std::string npy(const std::string& descr, const std::string& shape, const std::string& data, int version = 1) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t prefix = version == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(version) + '\0';
  size_t n = header.size();
  for (size_t i = 0; i < (version == 1 ? 2u : 4u); ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <typename T>
std::string raw(std::vector<T> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

TEST(Npy, AllSupportedDtypes) {
  Tensor f = data::parse_npy(npy("<f4", "(2, 2)", raw<float>({1, 2, 3, 4})), "f.npy");
  EXPECT_EQ(f.shape(), (Shape{2, 2}));
  EXPECT_EQ(f.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(data::parse_npy(npy("<f8", "(3,)", raw<double>({0.5, -1, 2})), "d.npy").to_vector(),
            (std::vector<float>{0.5f, -1, 2}));
  Tensor u = data::parse_npy(npy("|u1", "(3,)", "\x01\x02\xff"), "u.npy");
  EXPECT_EQ(u.dtype(), DType::UInt8);
  EXPECT_EQ(u.data<uint8_t>()[2], 255);
  Tensor i = data::parse_npy(npy("<i8", "(2,)", raw<int64_t>({-5, 7}), 2), "i.npy");
  EXPECT_EQ(i.dtype(), DType::Int32);
  EXPECT_EQ(i.data<int32_t>()[0], -5);
  EXPECT_EQ(data::parse_npy(npy("<i4", "()", raw<int32_t>({9})), "s.npy").numel(), 1);
}

TEST(Npy, BrokenFilesAreNamedErrors) {
  EXPECT_TRUE(
      testing::throws_error([] { data::parse_npy("NUMPY?", "a.npy"); }, {"a.npy", "byte offset 0", "not a .npy file"}));
  EXPECT_TRUE(testing::throws_error([] { data::parse_npy(npy(">f4", "(1,)", "abcd"), "a.npy"); },
                                    {"dtype '>f4' is not supported"}));
  EXPECT_TRUE(testing::throws_error(
      [] {
        data::parse_npy(npy("<f4", "(3,)", raw<float>({1, 2})), "a.npy");
      },
      {"needs 12 data bytes, the file has 8"}));
  EXPECT_TRUE(testing::throws_error(
      [] { data::parse_npy(npy("<i8", "(1,)", raw<int64_t>({int64_t{1} << 40})), "a.npy"); }, {"does not fit int32"}));
  std::string fortran = npy("<f4", "(1,)", raw<float>({1}));
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_TRUE(testing::throws_error([&] { data::parse_npy(fortran, "a.npy"); }, {"fortran_order is True"}));
  std::string huge = npy("<f4", "(1,)", "");
  huge[8] = '\xff';
  huge[9] = '\xff';
  EXPECT_TRUE(testing::throws_error([&] { data::parse_npy(huge, "a.npy"); }, {"runs past the end"}));
  EXPECT_TRUE(
      testing::throws_error([] { data::parse_npy(npy("<f4", "(a,)", ""), "a.npy"); }, {"something other than sizes"}));
}

}  // namespace
}  // namespace tandem
