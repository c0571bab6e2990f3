// Finds MNIST-layout datasets on disk and turns their IDX files into training tensors.
#include <sys/stat.h>

#include <cstdlib>

#include "tandem/data/idx.h"

namespace tandem::data {
namespace {

constexpr const char* kFiles[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                   "t10k-labels-idx1-ubyte"};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The file as given, or with .gz, or empty.
std::string find_file(const std::string& dir, const char* name) {
  std::string plain = dir + "/" + name;
  if (exists(plain)) return plain;
  if (exists(plain + ".gz")) return plain + ".gz";
  return {};
}

Split load_split(const std::string& images_path, const std::string& labels_path, const DatasetOptions& options) {
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  if (images.rank() != 3)
    fail("dataset: \"{}\" holds images of rank {}, expected 3 (count, rows, columns)", images_path, images.rank());
  if (labels.rank() != 1) fail("dataset: \"{}\" holds labels of rank {}, expected 1", labels_path, labels.rank());
  if (images.dim(0) != labels.dim(0))
    fail("dataset: \"{}\" has {} images but \"{}\" has {} labels", images_path, images.dim(0), labels_path,
         labels.dim(0));
  const uint8_t* l = labels.data<uint8_t>();
  for (int64_t i = 0; i < labels.dim(0); ++i)
    if (l[i] > 9)
      fail("dataset: \"{}\" byte offset {}: label {} of sample {} is out of range [0, 9]", labels_path, 8 + i, l[i], i);
  Split s;
  int64_t n = images.dim(0), h = images.dim(1), w = images.dim(2);
  Shape shape = options.flatten ? Shape{n, h * w} : options.channels ? Shape{n, h, w, 1} : Shape{n, h, w};
  s.x = Tensor::empty(shape);
  const uint8_t* src = images.data<uint8_t>();
  float* dst = s.x.data<float>();
  for (int64_t i = 0; i < n * h * w; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  s.y = labels.astype(DType::Int32);
  return s;
}

}  // namespace

std::vector<std::string> dataset_search_path(const std::string& data_dir) {
  std::vector<std::string> dirs;
  if (!data_dir.empty()) dirs.push_back(data_dir);
  if (const char* env = std::getenv("TANDEM_DATA"); env && *env) dirs.emplace_back(env);
  dirs.emplace_back("./data");
  return dirs;
}

ImageDataset load_dataset(const std::string& name, const DatasetOptions& options) {
  if (name != "mnist" && name != "fashion-mnist")
    fail("load_dataset: unknown dataset \"{}\"; expected \"mnist\" or \"fashion-mnist\"", name);
  std::string searched;
  for (const std::string& root : dataset_search_path(options.data_dir)) {
    std::string dir = root + "/" + name;
    std::string paths[4];
    bool all = true;
    for (int i = 0; i < 4; ++i) all = all && !(paths[i] = find_file(dir, kFiles[i])).empty();
    if (all) {
      ImageDataset d;
      d.directory = dir;
      d.train = load_split(paths[0], paths[1], options);
      d.test = load_split(paths[2], paths[3], options);
      return d;
    }
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  fail(
      "load_dataset: \"{}\" not found; searched {} (from --data-dir, $TANDEM_DATA, ./data) for {}, {}, {}, {} "
      "(optionally .gz); run scripts/setup to fetch it",
      name, searched, kFiles[0], kFiles[1], kFiles[2], kFiles[3]);
}

}  // namespace tandem::data
