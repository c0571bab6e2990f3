// The IDX reader on small hand-made files, good and broken, plain and gzip.
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "tandem/allocator.h"
#include "tandem/data/idx.h"
#include "test_util.h"

namespace tandem {
namespace {

using Bytes = std::vector<uint8_t>;

using testing::idx_bytes;

void write(const std::string& path, const Bytes& b) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}

Bytes images(uint32_t n) {
  Bytes px(n * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 17);
  return idx_bytes({n, 2, 2}, px);
}

Bytes labels(Bytes values) { return idx_bytes({static_cast<uint32_t>(values.size())}, values); }

TEST(Idx, ReadsPlainAndGzip) {
  testing::TempDir dir;
  write(dir.file("a"), images(3));
  write_gz(dir.file("a.gz"), images(3));
  for (const char* name : {"a", "a.gz"}) {
    Tensor t = data::read_idx(dir.file(name));
    EXPECT_EQ(t.dtype(), DType::UInt8);
    EXPECT_EQ(t.shape(), (Shape{3, 2, 2}));
    EXPECT_EQ(t.data<uint8_t>()[5], static_cast<uint8_t>(5 * 17));
  }
}

TEST(Idx, BrokenFilesNameTheFileAndOffset) {
  testing::TempDir dir;
  std::string p = dir.file("bad");
  write(p, Bytes{1, 0, 8, 1, 0, 0, 0, 1, 7});
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "byte offset 0", "not an IDX file"}));
  write(p, idx_bytes({2}, {1, 2}, 0x0D));
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "byte offset 2", "0x0d"}));
  write(p, Bytes{0, 0, 8, 0});
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "byte offset 3", "rank 0"}));
  write(p, Bytes{0, 0, 8, 2, 0, 0});
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); },
                                    {p, "truncated at byte offset 6", "a dimension needs 4 bytes"}));
  write(p, idx_bytes({3, 2, 2}, Bytes(10, 1)));
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "truncated at byte offset 26", "needs 12 bytes"}));
  write(p, idx_bytes({2}, Bytes{1, 2, 3}));
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "past the end", "byte offset 10"}));
  write(p, idx_bytes({0xFFFFFFFF, 0xFFFFFFFF}, {}));
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "more than 16 GiB"}));
  // Found by the fuzzer: a 4 GiB promise in a 10-byte file fails on the bytes, not on an allocation.
  write(p, Bytes{0, 0, 8, 1, 0xFF, 0xFF, 0xFF, 0xF9, 5, 6});
  uint64_t reserved_before = memory::stats().bytes_reserved;
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "truncated at byte offset 10"}));
  EXPECT_LT(memory::stats().bytes_reserved, reserved_before + (uint64_t{1} << 30));
  write(p, Bytes{});
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p); }, {p, "truncated at byte offset 0"}));
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(dir.file("missing")); }, {"cannot open", "missing"}));
  // A gzip stream cut short is reported too.
  write_gz(p + ".gz", images(50));
  std::ifstream in(p + ".gz", std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  write(p + ".gz", gz);
  EXPECT_TRUE(testing::throws_error([&] { data::read_idx(p + ".gz"); }, {p + ".gz"}));
}

void write_dataset(const std::string& dir, const Bytes& train_labels, uint32_t train_images = 3) {
  std::filesystem::create_directories(dir);
  write(dir + "/train-images-idx3-ubyte", images(train_images));
  write(dir + "/train-labels-idx1-ubyte", labels(train_labels));
  write_gz(dir + "/t10k-images-idx3-ubyte.gz", images(2));
  write_gz(dir + "/t10k-labels-idx1-ubyte.gz", labels({1, 9}));
}

TEST(Datasets, LoadsFromDataDirAndScales) {
  testing::TempDir dir;
  write_dataset(dir.file("mnist"), {0, 5, 9});
  auto d = data::load_dataset("mnist", {.data_dir = dir.path(), .flatten = true});
  EXPECT_EQ(d.train.x.shape(), (Shape{3, 4}));
  EXPECT_EQ(d.test.x.shape(), (Shape{2, 4}));
  EXPECT_FLOAT_EQ(d.train.x.data<float>()[1], 17.0f / 255.0f);
  EXPECT_EQ(d.train.y.dtype(), DType::Int32);
  EXPECT_EQ(d.test.y.data<int32_t>()[1], 9);
  auto c = data::load_dataset("mnist", {.data_dir = dir.path(), .channels = true});
  EXPECT_EQ(c.train.x.shape(), (Shape{3, 2, 2, 1}));
}

TEST(Datasets, CountMismatchAndBadLabelsAreErrors) {
  testing::TempDir dir;
  write_dataset(dir.file("mnist"), {0, 5}, 3);
  EXPECT_TRUE(
      testing::throws_error([&] { data::load_dataset("mnist", {.data_dir = dir.path()}); }, {"3 images", "2 labels"}));
  write_dataset(dir.file("mnist"), {0, 12, 3}, 3);
  EXPECT_TRUE(testing::throws_error([&] { data::load_dataset("mnist", {.data_dir = dir.path()}); },
                                    {"train-labels-idx1-ubyte", "byte offset 9", "label 12"}));
}

TEST(Datasets, MissingDatasetNamesDirectoriesAndFiles) {
  testing::TempDir dir;
  // Run from an empty directory so that a real ./data does not satisfy the lookup.
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  setenv("TANDEM_DATA", (dir.path() + "/env").c_str(), 1);
  EXPECT_TRUE(testing::throws_error([&] { data::load_dataset("fashion-mnist", {.data_dir = dir.path()}); },
                                    {dir.path() + "/fashion-mnist", dir.path() + "/env/fashion-mnist",
                                     "./data/fashion-mnist", "train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}));
  unsetenv("TANDEM_DATA");
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(testing::throws_error([] { data::load_dataset("cifar"); }, {"unknown dataset \"cifar\""}));
}

}  // namespace
}  // namespace tandem
