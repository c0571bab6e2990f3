// safetensors round trips, and every way a file can be broken.
#include <filesystem>

#include "tandem/io.h"
#include "test_util.h"

namespace tandem {
namespace {

io::TensorFile sample() {
  io::TensorFile f;
  f.tensors.emplace_back("w", testing::random_tensor({3, 4}, 1));
  f.tensors.emplace_back("step", Tensor::from_vector({1}, std::vector<int32_t>{42}));
  f.metadata["format"] = "tandem";
  return f;
}

TEST(Crc32c, KnownAnswers) {
  // RFC 3720 test vector and the classic check value.
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(io::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(io::crc32c("123456789", 9), 0xE3069283u);
  // Incremental equals one shot.
  EXPECT_EQ(io::crc32c("6789", 4, io::crc32c("12345", 5)), 0xE3069283u);
}

TEST(Safetensors, RoundTripIsExactAndInOrder) {
  testing::TempDir dir;
  io::TensorFile f = sample();
  io::save_safetensors(dir.file("a.safetensors"), f);
  io::TensorFile g = io::load_safetensors(dir.file("a.safetensors"));
  ASSERT_EQ(g.tensors.size(), 2u);
  EXPECT_EQ(g.tensors[0].first, "w");
  EXPECT_EQ(g.tensors[0].second.to_vector(), f.tensors[0].second.to_vector());
  EXPECT_EQ(g.tensors[1].second.dtype(), DType::Int32);
  EXPECT_EQ(g.tensors[1].second.data<int32_t>()[0], 42);
  EXPECT_EQ(g.metadata["format"], "tandem");
  EXPECT_EQ(g.metadata.count("crc32c:w"), 1u);
}

TEST(Safetensors, LayoutFollowsTheFormat) {
  std::string bytes = io::encode_safetensors(sample());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12 * 4 + 4);
  std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find("\"w\":{\"data_offsets\":[0,48],\"dtype\":\"F32\",\"shape\":[3,4]}"), std::string::npos)
      << header;
  EXPECT_NE(header.find("\"step\":{\"data_offsets\":[48,52],\"dtype\":\"I32\""), std::string::npos) << header;
}

TEST(Safetensors, CorruptFilesAreNamedErrors) {
  testing::TempDir dir;
  std::string good = io::encode_safetensors(sample());
  auto write = [&](const std::string& bytes) {
    std::string p = dir.file("bad.safetensors");
    io::write_file_atomically(p, bytes);
    return p;
  };
  std::string flipped = good;
  flipped[flipped.size() - 10] ^= 0x40;  // inside tensor "w"
  std::string p = write(flipped);
  EXPECT_TRUE(testing::throws_error([&] { io::load_safetensors(p); }, {p, "\"w\" is corrupt", "CRC-32C"}));
  EXPECT_TRUE(
      testing::throws_error([&] { io::load_safetensors(write(good.substr(0, 5))); }, {"truncated at byte offset 5"}));
  EXPECT_TRUE(testing::throws_error([&] { io::load_safetensors(write(good.substr(0, good.size() - 4))); },
                                    {"\"step\"", "fall outside"}));
  std::string huge = good;
  huge[7] = 0x7f;
  EXPECT_TRUE(testing::throws_error([&] { io::load_safetensors(write(huge)); }, {"byte offset 0", "header length"}));
  std::string bad_json = good;
  bad_json[8] = '!';  // the opening brace
  EXPECT_TRUE(testing::throws_error([&] { io::load_safetensors(write(bad_json)); }, {"malformed JSON header"}));
  auto with_header = [&](const std::string& json) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
    return write(out + json + std::string(16, '\0'));
  };
  EXPECT_TRUE(testing::throws_error(
      [&] { io::load_safetensors(with_header(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})")); },
      {"\"a\"", "dtype F64 is not supported"}));
  EXPECT_TRUE(testing::throws_error(
      [&] { io::load_safetensors(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})")); },
      {"\"a\"", "span 8 bytes", "needs 12"}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        io::load_safetensors(with_header(
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"));
      },
      {"overlap"}));
  EXPECT_TRUE(testing::throws_error(
      [&] { io::load_safetensors(with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})")); },
      {"invalid size"}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        io::load_safetensors(with_header(
            R"({"__metadata__":{"format":"tandem"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"));
      },
      {"no checksum"}));
  // Found by the fuzzer: a number too large for JSON's integer types.
  EXPECT_TRUE(testing::throws_error(
      [&] { io::load_safetensors(with_header(R"({"a":{"dtype":"F32","shape":[5777777e777],"data_offsets":[0,8]}})")); },
      {"malformed JSON header", "number overflow"}));
  // A file written by another tool (no checksums, no Tandem format tag) loads.
  EXPECT_NO_THROW(io::load_safetensors(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})")));
}

TEST(AtomicWrite, ReplacesAndLeavesNoTemporaryFiles) {
  testing::TempDir dir;
  std::string p = dir.file("f");
  io::write_file_atomically(p, "one");
  io::write_file_atomically(p, "two");
  EXPECT_EQ(io::read_file(p), "two");
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_TRUE(
      testing::throws_error([&] { io::write_file_atomically(dir.file("no/such/dir/f"), "x"); }, {"cannot create"}));
}

}  // namespace
}  // namespace tandem
