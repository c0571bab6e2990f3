// Keras' files at the byte level (tandem/keras_io.h): zip archives written and read back, deflated
// entries (what other zip writers make) read, and every way an archive or weights file can be
// broken named; Keras 3's HDF5 weights groups round trip exactly.
#include <zlib.h>

#include "tandem/io.h"
#include "tandem/keras_io.h"
#include "test_util.h"

namespace tandem {
namespace {

// The error `f` throws holds `part`.
void expect_error(const std::function<void()>& f, const std::string& part) {
  std::string message = testing::error_of(f);
  EXPECT_NE(message.find(part), std::string::npos) << message << " (expected: " << part << ")";
}

TEST(Zip, RoundTripKeepsNamesAndBytes) {
  std::string binary(1000, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7);
  std::vector<io::ZipEntry> in{{"metadata.json", "{}"}, {"config.json", "{\"a\": 1}"}, {"model.weights.h5", binary}};
  auto out = io::decode_zip(io::encode_zip(in), "x.keras");
  ASSERT_EQ(out.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].name, in[i].name);
    EXPECT_EQ(out[i].data, in[i].data);
  }
}

// A one-entry archive with the entry deflated, as zlib (and Python's zipfile) write it.
std::string deflated_zip(const std::string& name, const std::string& data) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string packed(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(packed.data());
  z.avail_out = static_cast<uInt>(packed.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  packed.resize(z.total_out);
  deflateEnd(&z);
  // Start from a stored archive of the packed bytes, then mark the entry deflated with the real
  // size and CRC in both headers.
  std::string zip = io::encode_zip({{name, packed}});
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) zip[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  auto crc =
      static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  size_t central = zip.size() - 22 - 46 - name.size();
  zip[8] = 8, zip[central + 10] = 8;
  put32(14, crc), put32(central + 16, crc);
  put32(22, static_cast<uint32_t>(data.size())), put32(central + 24, static_cast<uint32_t>(data.size()));
  return zip;
}

TEST(Zip, DeflatedEntriesAreRead) {
  std::string text(5000, 'k');
  auto out = io::decode_zip(deflated_zip("config.json", text), "d.keras");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, text);
}

TEST(Zip, BrokenArchivesAreNamedErrors) {
  std::string good = io::encode_zip({{"config.json", "{\"class_name\": \"Sequential\"}"}});
  expect_error([&] { io::decode_zip("just some text", "t.keras"); }, "\"t.keras\" is not a zip archive");
  expect_error([&] { io::decode_zip(good.substr(0, good.size() - 30), "t.keras"); },
               "no end-of-central-directory record (truncated?)");
  std::string bad_crc = good;
  bad_crc[30 + 11 + 3] ^= 1;  // a byte of the entry's data
  expect_error([&] { io::decode_zip(bad_crc, "t.keras"); }, "\"t.keras\", entry \"config.json\": CRC-32 is");
  std::string method = good;
  method[method.size() - 22 - 46 - 11 + 10] = 12;  // bzip2, in the central directory
  expect_error([&] { io::decode_zip(method, "t.keras"); }, "compression method");
  std::string deflated = deflated_zip("config.json", std::string(3000, 'q'));
  deflated[30 + 11 + 4] ^= 0x55;  // inside the deflate stream (after the local header and name)
  expect_error([&] { io::decode_zip(deflated, "t.keras"); }, "entry \"config.json\"");
}

std::vector<io::KerasVars> sample_groups() {
  return {{"", "sequential", {}},
          {"layers/dense", "dense", {testing::random_tensor({4, 3}, 1), testing::random_tensor({3}, 2)}},
          {"layers/dropout", "dropout", {}},
          {"optimizer",
           "adam",
           {Tensor::from_vector({1}, std::vector<int32_t>{7}).reshape(Shape()), Tensor::full(Shape(), 0.001f)}}};
}

TEST(KerasWeights, RoundTripIsExact) {
  std::string bytes = io::encode_keras_weights(sample_groups());
  EXPECT_TRUE(io::is_hdf5(bytes));
  auto groups = io::decode_keras_weights(bytes, "w.weights.h5");
  ASSERT_EQ(groups.size(), 4u);  // in path order
  EXPECT_EQ(groups[0].path, "");
  EXPECT_EQ(groups[0].name, "sequential");
  EXPECT_EQ(groups[1].path, "layers/dense");
  EXPECT_EQ(groups[1].name, "dense");
  ASSERT_EQ(groups[1].values.size(), 2u);
  EXPECT_EQ(groups[1].values[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(groups[1].values[0].to_vector(), testing::random_tensor({4, 3}, 1).to_vector());
  EXPECT_EQ(groups[2].path, "layers/dropout");
  EXPECT_TRUE(groups[2].values.empty());
  EXPECT_EQ(groups[3].path, "optimizer");
  EXPECT_EQ(groups[3].values[0].dtype(), DType::Int32);  // int64 on file
  EXPECT_EQ(groups[3].values[0].shape().rank(), 0);
  EXPECT_EQ(groups[3].values[0].data<int32_t>()[0], 7);
  EXPECT_EQ(groups[3].values[1].item(), 0.001f);
}

TEST(KerasWeights, BrokenFilesAreNamedErrors) {
  std::string bytes = io::encode_keras_weights(sample_groups());
  expect_error([&] { io::decode_keras_weights("PK\x03\x04 not hdf5", "w.weights.h5"); },
               "\"w.weights.h5\" is not an HDF5 file");
  expect_error([&] { io::decode_keras_weights(bytes.substr(0, 600), "w.weights.h5"); }, "\"w.weights.h5\"");
  // A group whose datasets are not "0", "1", ...: written through a name the writer would never use.
  std::string odd = io::encode_keras_weights({{"layers/dense/vars/x", "", {testing::random_tensor({2}, 1)}}});
  expect_error([&] { io::decode_keras_weights(odd, "o.weights.h5"); }, "holds \"x\"; Keras names its datasets");
}

}  // namespace
}  // namespace tandem
