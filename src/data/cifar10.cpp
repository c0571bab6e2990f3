#include <sys/stat.h>

#include "tandem/data/loaders.h"
#include "tandem/io.h"

namespace tandem::data {
namespace {
constexpr size_t kPixels = 32 * 32 * 3, kRecord = 1 + kPixels;
}

Split parse_cifar10(std::string_view bytes, const std::string& name) {
  if (bytes.empty()) fail("cifar10: \"{}\" is empty", name);
  if (bytes.size() % kRecord != 0)
    fail("cifar10: \"{}\" is truncated at byte offset {}: the last record has {} of its {} bytes", name, bytes.size(),
         bytes.size() % kRecord, kRecord);
  int64_t n = static_cast<int64_t>(bytes.size() / kRecord);
  Split s{Tensor::empty({n, 32, 32, 3}), Tensor::empty({n}, DType::Int32)};
  float* x = s.x.data<float>();
  int32_t* y = s.y.data<int32_t>();
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = p + static_cast<size_t>(i) * kRecord;
    if (r[0] > 9)
      fail("cifar10: \"{}\" byte offset {}: label {} of record {} is out of range [0, 9]", name,
           static_cast<size_t>(i) * kRecord, r[0], i);
    y[i] = r[0];
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 1024; ++k)
        x[static_cast<size_t>(i) * kPixels + static_cast<size_t>(k) * 3 + static_cast<size_t>(c)] =
            r[1 + c * 1024 + k] / 255.0f;
  }
  return s;
}

Split read_cifar10(const std::vector<std::string>& paths) {
  if (paths.empty()) fail("cifar10: no files given");
  std::vector<Split> parts;
  int64_t n = 0;
  for (const auto& p : paths) {
    parts.push_back(parse_cifar10(io::read_file(p), p));
    n += parts.back().x.dim(0);
  }
  Split all{Tensor::empty({n, 32, 32, 3}), Tensor::empty({n}, DType::Int32)};
  int64_t at = 0;
  for (const Split& s : parts) {
    int64_t k = s.x.dim(0);
    all.x.slice(at, at + k).copy_from(s.x);
    all.y.slice(at, at + k).copy_from(s.y);
    at += k;
  }
  return all;
}

ImageDataset load_cifar10(const std::string& data_dir) {
  std::string searched;
  for (const std::string& root : dataset_search_path(data_dir)) {
    for (const char* sub : {"cifar10", "cifar-10-batches-bin"}) {
      std::string dir = root + "/" + sub;
      std::vector<std::string> train;
      bool all = true;
      struct stat st {};
      for (int i = 1; i <= 5; ++i) {
        train.push_back(fmt::format("{}/data_batch_{}.bin", dir, i));
        all = all && ::stat(train.back().c_str(), &st) == 0;
      }
      std::string test = dir + "/test_batch.bin";
      all = all && ::stat(test.c_str(), &st) == 0;
      if (all) return ImageDataset{read_cifar10(train), read_cifar10({test}), dir};
      searched += (searched.empty() ? "" : ", ") + dir;
    }
  }
  fail(
      "load_cifar10: CIFAR-10 not found; searched {} for data_batch_1.bin … data_batch_5.bin and test_batch.bin "
      "(the binary version of the dataset)",
      searched);
}

}  // namespace tandem::data
