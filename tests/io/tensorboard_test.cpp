// TensorBoard event files read back: TFRecord framing with masked CRC-32C, then the Event and
// Summary protocol buffers decoded field by field.
#include <cstring>
#include <filesystem>

#include "tandem/io.h"
#include "tandem/model.h"
#include "test_util.h"

namespace tandem {
namespace {

struct Scalar {
  int64_t step;
  std::string tag;
  float value;
};

struct Reader {
  std::string_view b;
  size_t p = 0;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      uint8_t c = static_cast<uint8_t>(b.at(p++));
      v |= uint64_t{c & 0x7Fu} << shift;
      if (!(c & 0x80)) return v;
    }
  }
  std::string_view bytes() {
    size_t n = varint();
    std::string_view s = b.substr(p, n);
    p += n;
    return s;
  }
  template <typename T>
  T fixed() {
    T v;
    std::memcpy(&v, b.data() + p, sizeof(T));
    p += sizeof(T);
    return v;
  }
};

// Checks every record's framing and returns the events' payloads.
std::vector<std::string> read_records(const std::string& path) {
  std::string data = io::read_file(path);
  std::vector<std::string> out;
  size_t p = 0;
  while (p < data.size()) {
    EXPECT_GE(data.size() - p, 12u);
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, data.data() + p, 8);
    std::memcpy(&len_crc, data.data() + p + 8, 4);
    EXPECT_EQ(len_crc, io::masked_crc32c(data.data() + p, 8));
    std::string payload = data.substr(p + 12, len);
    std::memcpy(&data_crc, data.data() + p + 12 + len, 4);
    EXPECT_EQ(data_crc, io::masked_crc32c(payload.data(), payload.size()));
    out.push_back(payload);
    p += 12 + len + 4;
  }
  return out;
}

std::vector<Scalar> decode(const std::vector<std::string>& events, std::string* file_version) {
  std::vector<Scalar> out;
  for (const std::string& e : events) {
    Reader r{e};
    int64_t step = 0;
    while (r.p < e.size()) {
      uint64_t key = r.varint();
      int field = static_cast<int>(key >> 3);
      if (field == 1) r.fixed<double>();
      else if (field == 2) step = static_cast<int64_t>(r.varint());
      else if (field == 3) *file_version = std::string(r.bytes());
      else if (field == 5) {
        Reader summary{r.bytes()};
        while (summary.p < summary.b.size()) {
          EXPECT_EQ(summary.varint(), uint64_t{1 << 3 | 2});
          Reader value{summary.bytes()};
          Scalar s{step, "", 0.0f};
          while (value.p < value.b.size()) {
            uint64_t k = value.varint();
            if (k == (1 << 3 | 2)) s.tag = std::string(value.bytes());
            else if (k == (2 << 3 | 5)) s.value = value.fixed<float>();
            else ADD_FAILURE() << "unexpected Value field " << k;
          }
          out.push_back(s);
        }
      } else {
        ADD_FAILURE() << "unexpected Event field " << field;
        break;
      }
    }
  }
  return out;
}

TEST(TfRecord, KnownFraming) {
  // An empty record: length 0, its masked CRC, no data, the masked CRC of nothing.
  std::string r = io::tfrecord("");
  ASSERT_EQ(r.size(), 16u);
  uint32_t len_crc, data_crc;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 12, 4);
  uint64_t zero = 0;
  uint32_t c = io::crc32c(&zero, 8);
  EXPECT_EQ(len_crc, ((c >> 15) | (c << 17)) + 0xa282ead8u);
  EXPECT_EQ(data_crc, 0xa282ead8u);  // CRC of no bytes is 0
}

TEST(EventWriter, ScalarsReadBack) {
  testing::TempDir dir;
  std::string path;
  {
    io::EventWriter w(dir.file("run"));
    w.add_scalar("epoch_loss", 0.25f, 3);
    w.add_scalar("epoch_accuracy", 0.875f, 4);
    path = w.path();
  }
  EXPECT_NE(path.find("/run/events.out.tfevents."), std::string::npos);
  std::string version;
  auto scalars = decode(read_records(path), &version);
  EXPECT_EQ(version, "brain.Event:2");
  ASSERT_EQ(scalars.size(), 2u);
  EXPECT_EQ(scalars[0].tag, "epoch_loss");
  EXPECT_EQ(scalars[0].value, 0.25f);
  EXPECT_EQ(scalars[0].step, 3);
  EXPECT_EQ(scalars[1].tag, "epoch_accuracy");
  EXPECT_EQ(scalars[1].step, 4);
}

TEST(TensorBoardCallback, WritesTrainAndValidationScalarsPerEpoch) {
  testing::TempDir dir;
  using namespace layers;
  Sequential model;
  model.add(Dense(4, "softmax", {.input_shape = Shape{3}}));
  model.compile(optimizers::SGD(0.1f), "sparse_categorical_crossentropy", {"accuracy"});
  Tensor x = testing::random_tensor({40, 3}, 1);
  std::vector<int32_t> labels(40);
  for (int i = 0; i < 40; ++i) labels[static_cast<size_t>(i)] = i % 4;
  History h = model.fit(x, Tensor::from_vector({40}, std::span<const int32_t>(labels)),
                        {.epochs = 2,
                         .batch_size = 10,
                         .validation_split = 0.25,
                         .callbacks = {std::make_shared<TensorBoard>(dir.path(), TensorBoardOptions{.update_freq = 1})},
                         .verbose = 0});
  auto files_in = [&](const std::string& sub) {
    std::vector<std::string> f;
    for (auto& e : std::filesystem::directory_iterator(dir.path() + "/" + sub)) f.push_back(e.path());
    return f;
  };
  auto train = files_in("train"), validation = files_in("validation");
  ASSERT_EQ(train.size(), 1u);
  ASSERT_EQ(validation.size(), 1u);
  std::string version;
  auto t = decode(read_records(train[0]), &version);
  auto v = decode(read_records(validation[0]), &version);
  auto find = [](const std::vector<Scalar>& s, const std::string& tag, int64_t step) -> const Scalar* {
    for (const auto& x : s)
      if (x.tag == tag && x.step == step) return &x;
    return nullptr;
  };
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE(find(t, "epoch_loss", epoch));
    EXPECT_FLOAT_EQ(find(t, "epoch_loss", epoch)->value, static_cast<float>(h["loss"][static_cast<size_t>(epoch)]));
    EXPECT_FLOAT_EQ(find(t, "epoch_learning_rate", epoch)->value, 0.1f);
    ASSERT_TRUE(find(v, "epoch_accuracy", epoch));
    EXPECT_FLOAT_EQ(find(v, "epoch_accuracy", epoch)->value,
                    static_cast<float>(h["val_accuracy"][static_cast<size_t>(epoch)]));
  }
  EXPECT_TRUE(find(t, "batch_loss", 6));  // 3 steps per epoch, update_freq 1
}

}  // namespace
}  // namespace tandem
