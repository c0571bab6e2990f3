// save_weights / load_weights: a simple binary file of named float32 tensors.
//   "TANDEMW1" | u32 count | count × (u32 name bytes | name | u32 rank | i64 dims[rank] | f32 data)
// Written to a temporary file and renamed, so that a crash never leaves a half-written file.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tandem/model.h"

namespace tandem {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'W', '1'};

struct File {
  std::FILE* f;
  ~File() { if (f) std::fclose(f); }
};

class Reader {
 public:
  Reader(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void read(void* dst, size_t bytes, const char* what) {
    size_t got = std::fread(dst, 1, bytes, f_);
    if (got != bytes)
      fail("load_weights: file \"{}\" is truncated at byte offset {}: expected {} bytes of {}, found {}", path_,
           offset_ + got, bytes, what, got);
    offset_ += bytes;
  }
  uint64_t offset() const { return offset_; }

 private:
  std::FILE* f_;
  const std::string& path_;
  uint64_t offset_ = 0;
};

}  // namespace

std::vector<std::pair<std::string, Tensor>> Sequential::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (Variable* v : variables()) out.emplace_back(v->name, v->value);
  if (optimizer_) {
    optimizer_->build(trainable_variables());
    for (auto& entry : optimizer_->state()) out.push_back(std::move(entry));
  }
  return out;
}

void Sequential::save_weights(const std::string& path) {
  if (!built()) fail("save_weights: model \"{}\" is not built yet (call build() or fit() first)", name_);
  std::string tmp = path + ".tmp";
  {
    File file{std::fopen(tmp.c_str(), "wb")};
    if (!file.f) fail("save_weights: cannot open \"{}\" for writing: {}", tmp, std::strerror(errno));
    auto entries = state();
    auto count = static_cast<uint32_t>(entries.size());
    bool ok = std::fwrite(kMagic, 1, 8, file.f) == 8 && std::fwrite(&count, 4, 1, file.f) == 1;
    for (auto& [name, tensor] : entries) {
      Tensor t = tensor.contiguous();
      auto name_len = static_cast<uint32_t>(name.size());
      auto rank = static_cast<uint32_t>(t.rank());
      ok = ok && std::fwrite(&name_len, 4, 1, file.f) == 1 && std::fwrite(name.data(), 1, name.size(), file.f) == name.size() &&
           std::fwrite(&rank, 4, 1, file.f) == 1 &&
           std::fwrite(t.shape().begin(), 8, rank, file.f) == rank &&
           std::fwrite(t.data<float>(), 4, static_cast<size_t>(t.numel()), file.f) == static_cast<size_t>(t.numel());
    }
    ok = ok && std::fflush(file.f) == 0;
    if (!ok) {
      std::remove(tmp.c_str());
      fail("save_weights: writing \"{}\" failed: {}", tmp, std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("save_weights: cannot rename \"{}\" to \"{}\": {}", tmp, path, std::strerror(errno));
}

void Sequential::load_weights(const std::string& path) {
  File file{std::fopen(path.c_str(), "rb")};
  if (!file.f) fail("load_weights: cannot open \"{}\": {}", path, std::strerror(errno));
  Reader in(file.f, path);
  char magic[8];
  in.read(magic, 8, "magic");
  if (std::memcmp(magic, kMagic, 8) != 0)
    fail("load_weights: file \"{}\" is not a Tandem weights file (byte offset 0: expected magic \"TANDEMW1\")", path);
  uint32_t count = 0;
  in.read(&count, 4, "tensor count");
  std::vector<std::pair<std::string, Tensor>> loaded;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_len = 0, rank = 0;
    in.read(&name_len, 4, "name length");
    if (name_len > 4096) fail("load_weights: file \"{}\" byte offset {}: name length {} exceeds 4096", path, in.offset() - 4, name_len);
    std::string name(name_len, '\0');
    in.read(name.data(), name_len, "name");
    in.read(&rank, 4, "rank");
    if (rank > Shape::kMaxRank) fail("load_weights: file \"{}\" byte offset {}: rank {} of \"{}\" exceeds {}", path, in.offset() - 4, rank, name, Shape::kMaxRank);
    int64_t dims[Shape::kMaxRank];
    in.read(dims, 8 * rank, "dimensions");
    int64_t elements = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      if (dims[d] < 0 || dims[d] > (int64_t{1} << 32))
        fail("load_weights: file \"{}\": \"{}\" has an invalid dimension {}", path, name, dims[d]);
      elements *= std::max<int64_t>(dims[d], 1);
      if (elements > (int64_t{1} << 32))
        fail("load_weights: file \"{}\": \"{}\" claims more than 2^32 elements", path, name);
    }
    Shape shape(std::span<const int64_t>(dims, rank));
    Tensor t = Tensor::empty(shape);
    in.read(t.data<float>(), 4 * static_cast<size_t>(shape.numel()), "tensor data");
    loaded.emplace_back(std::move(name), std::move(t));
  }
  if (!built()) fail("load_weights: model \"{}\" is not built yet (call build() with the input shape first)", name_);
  auto find = [&](const std::string& name) -> const Tensor* {
    for (auto& [n, t] : loaded)
      if (n == name) return &t;
    return nullptr;
  };
  for (Variable* v : variables()) {
    const Tensor* t = find(v->name);
    if (!t) fail("load_weights: file \"{}\" has no tensor \"{}\"", path, v->name);
    if (!(t->shape() == v->value.shape()))
      fail("load_weights: \"{}\" in \"{}\" has shape {}, the model expects {}", v->name, path, t->shape().str(),
           v->value.shape().str());
    v->value.copy_from(*t);
  }
  if (optimizer_ && find("optimizer/iterations")) {
    auto vars = trainable_variables();
    optimizer_->load_state(loaded, vars);
  }
}

}  // namespace tandem
