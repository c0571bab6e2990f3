// Dataset::cache: the first complete pass is kept (in memory or in a safetensors file) and
// replayed by every later pass. A pass abandoned half-way keeps nothing.
#include <filesystem>
#include <mutex>

#include "tandem/data/dataset.h"
#include "tandem/io.h"

namespace tandem::data {
namespace {

struct CacheState {
  std::mutex mutex;
  std::shared_ptr<const std::vector<Element>> elements;  // set once a pass completes
};

std::shared_ptr<const std::vector<Element>> read_cache_file(const std::string& path) {
  io::TensorFile f = io::load_safetensors(path);
  auto number = [&](const char* key) -> long long {
    auto it = f.metadata.find(key);
    try {
      if (it != f.metadata.end()) return std::stoll(it->second);
    } catch (const std::exception&) {
    }
    fail("cache: \"{}\" is not a dataset cache file (metadata \"{}\" missing or not a number)", path, key);
  };
  long long count = number("elements"), components = number("components");
  if (count < 0 || components < 1 && count > 0) fail("cache: \"{}\" has invalid metadata", path);
  if (static_cast<int64_t>(f.tensors.size()) != count * components)
    fail("cache: \"{}\" holds {} tensors, its metadata promises {} elements of {}", path, f.tensors.size(), count,
         components);
  auto out = std::make_shared<std::vector<Element>>(static_cast<size_t>(count));
  for (size_t i = 0; i < f.tensors.size(); ++i)
    (*out)[i / static_cast<size_t>(components)].push_back(std::move(f.tensors[i].second));
  return out;
}

void write_cache_file(const std::string& path, const std::vector<Element>& elements) {
  io::TensorFile f;
  for (size_t i = 0; i < elements.size(); ++i)
    for (size_t c = 0; c < elements[i].size(); ++c)
      f.tensors.emplace_back(fmt::format("e{}/c{}", i, c), elements[i][c]);
  f.metadata["elements"] = std::to_string(elements.size());
  f.metadata["components"] = std::to_string(elements.empty() ? 0 : elements[0].size());
  io::save_safetensors(path, f);
}

class ReplayIterator : public Iterator {
 public:
  explicit ReplayIterator(std::shared_ptr<const std::vector<Element>> elements) : elements_(std::move(elements)) {}
  std::optional<Element> next() override {
    if (i_ >= elements_->size()) return std::nullopt;
    return (*elements_)[i_++];
  }

 private:
  std::shared_ptr<const std::vector<Element>> elements_;
  size_t i_ = 0;
};

class FillingIterator : public Iterator {
 public:
  FillingIterator(std::unique_ptr<Iterator> up, std::shared_ptr<CacheState> state, std::string path)
      : up_(std::move(up)), state_(std::move(state)), path_(std::move(path)) {}
  std::optional<Element> next() override {
    auto e = up_->next();
    if (e) {
      seen_.push_back(*e);
      return e;
    }
    auto done = std::make_shared<const std::vector<Element>>(std::move(seen_));
    if (!path_.empty()) write_cache_file(path_, *done);
    std::lock_guard lock(state_->mutex);
    if (!state_->elements) state_->elements = done;
    return std::nullopt;
  }

 private:
  std::unique_ptr<Iterator> up_;
  std::shared_ptr<CacheState> state_;
  std::string path_;
  std::vector<Element> seen_;
};

class CacheNode : public DatasetNode {
 public:
  CacheNode(std::shared_ptr<const DatasetNode> up, std::string path)
      : up_(std::move(up)), path_(std::move(path)), state_(std::make_shared<CacheState>()) {}
  std::unique_ptr<Iterator> iterate(int epoch) const override {
    {
      std::lock_guard lock(state_->mutex);
      if (!state_->elements && !path_.empty() && std::filesystem::exists(path_))
        state_->elements = read_cache_file(path_);
      if (state_->elements) return std::make_unique<ReplayIterator>(state_->elements);
    }
    return std::make_unique<FillingIterator>(up_->iterate(epoch), state_, path_);
  }
  int64_t cardinality() const override { return up_->cardinality(); }

 private:
  std::shared_ptr<const DatasetNode> up_;
  std::string path_;
  std::shared_ptr<CacheState> state_;
};

}  // namespace

Dataset Dataset::cache(const std::string& path) const {
  if (cardinality() == kInfinite) fail("cache: the dataset is infinite; cache before repeat()");
  return Dataset(std::make_shared<CacheNode>(node_, path));
}

}  // namespace tandem::data
