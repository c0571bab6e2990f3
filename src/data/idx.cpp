// IDX reader: magic (0, 0, type, rank), rank big-endian u32 dimensions, then the data.
// zlib's gz* functions read plain and gzip files alike, so one path serves both.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "tandem/data/idx.h"

namespace tandem::data {
namespace {

class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) fail_file(errno, "read_idx: cannot open \"{}\": {}", path, std::strerror(errno));
    gzbuffer(file_, 1 << 17);
  }
  ~GzReader() {
    if (file_) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads exactly `bytes` or fails naming what was being read and where the file ended.
  void read(void* dst, size_t bytes, const char* what) {
    size_t done = 0;
    while (done < bytes) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
      int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        fail("read_idx: \"{}\" is corrupt at byte offset {} (decompressed) while reading {}: {}", path_, offset_ + done,
             what, msg);
      }
      if (got == 0)
        fail("read_idx: \"{}\" is truncated at byte offset {}: {} needs {} bytes, the file has {} left", path_,
             offset_ + done, what, bytes, done);
      done += static_cast<size_t>(got);
    }
    offset_ += bytes;
  }
  uint64_t offset() const { return offset_; }
  bool at_end() {
    char c;
    return gzread(file_, &c, 1) == 0;
  }

 private:
  std::string path_;
  gzFile file_;
  uint64_t offset_ = 0;
};

}  // namespace

Tensor read_idx(const std::string& path) {
  GzReader in(path);
  std::array<uint8_t, 4> magic{};
  in.read(magic.data(), 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0)
    fail("read_idx: \"{}\" is not an IDX file: byte offset 0 should hold 0x00 0x00, found 0x{:02x} 0x{:02x}", path,
         magic[0], magic[1]);
  if (magic[2] != 0x08)
    fail("read_idx: \"{}\" byte offset 2: data type 0x{:02x} is not supported (expected 0x08, unsigned bytes)", path,
         magic[2]);
  int rank = magic[3];
  if (rank < 1 || rank > Shape::kMaxRank)
    fail("read_idx: \"{}\" byte offset 3: rank {} out of range [1, {}]", path, rank, Shape::kMaxRank);
  Shape shape;
  uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    std::array<uint8_t, 4> b{};
    in.read(b.data(), 4, "a dimension");
    uint64_t d = (uint64_t{b[0]} << 24) | (uint64_t{b[1]} << 16) | (uint64_t{b[2]} << 8) | b[3];
    total *= d;
    if (total > (uint64_t{1} << 34))
      fail("read_idx: \"{}\" byte offset {}: dimensions describe more than 16 GiB of data", path, in.offset() - 4);
    shape.push_back(static_cast<int64_t>(d));
  }
  // The dimensions may promise more than the file holds: read in chunks, and allocate the tensor
  // only once the bytes are there, so that a lying header cannot make us allocate gigabytes.
  std::string bytes;
  constexpr uint64_t kChunk = 1 << 24;
  while (bytes.size() < total) {
    size_t before = bytes.size();
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(kChunk, total - before));
    bytes.resize(before + chunk);
    in.read(bytes.data() + before, chunk, "the data");
  }
  Tensor t = Tensor::empty(shape, DType::UInt8);
  if (total > 0) std::memcpy(t.data<uint8_t>(), bytes.data(), total);
  if (!in.at_end())
    fail("read_idx: \"{}\" has bytes past the end of its data at byte offset {} (dimensions {} promise {} bytes)", path,
         in.offset(), shape.str(), total);
  return t;
}

}  // namespace tandem::data
