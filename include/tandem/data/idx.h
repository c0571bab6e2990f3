#pragma once
// IDX files (the MNIST format), plain or gzip-compressed, and the datasets stored in them.
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::data {

// Reads an IDX file of unsigned bytes (type 0x08) into a uint8 tensor of the file's dimensions.
// Every malformation is a tandem::Error naming the file and the byte offset.
Tensor read_idx(const std::string& path);

struct Split {
  Tensor x;  // float32 (samples, 28, 28) scaled to [0, 1]
  Tensor y;  // int32 (samples,)
};
struct ImageDataset {
  Split train, test;
  std::string directory;  // where it was found
};

struct DatasetOptions {
  std::string data_dir;   // searched first when set
  bool flatten = false;   // (samples, 784) instead of (samples, 28, 28)
  bool channels = false;  // (samples, 28, 28, 1), for convolutions
};

// "mnist" or "fashion-mnist", looked up in options.data_dir, then $TANDEM_DATA, then ./data
// (each with the dataset's name as a subdirectory). A missing dataset names every directory
// searched and the files expected there.
ImageDataset load_dataset(const std::string& name, const DatasetOptions& options = {});

// The directories load_dataset would search, in order.
std::vector<std::string> dataset_search_path(const std::string& data_dir);

}  // namespace tandem::data
