#pragma once
// Loaders for CIFAR-10 binary batches, CSV and NumPy .npy files. Each has a file form and a
// bytes form (the fuzz targets feed the latter); every malformation is a tandem::Error naming
// the file and the byte offset, never a crash or an out-of-bounds read.
#include <string>
#include <string_view>
#include <vector>

#include "tandem/data/idx.h"

namespace tandem::data {

// CIFAR-10 binary records: 1 label byte, then 3072 pixel bytes (1024 red, 1024 green, 1024 blue,
// row-major 32x32). Returns x float32 (n, 32, 32, 3) in [0, 1] (channels last) and y int32 (n,).
Split parse_cifar10(std::string_view bytes, const std::string& name);
Split read_cifar10(const std::vector<std::string>& paths);
// data_batch_1..5.bin and test_batch.bin in <root>/cifar10 (or <root>/cifar-10-batches-bin),
// searched like load_dataset.
ImageDataset load_cifar10(const std::string& data_dir = "");

struct CsvOptions {
  char delimiter = ',';
  enum class Header { Auto, Yes, No } header = Header::Auto;  // Auto: a first row that is not all numbers
};
struct CsvTable {
  std::vector<std::string> columns;  // names from the header, else "0", "1", …
  Tensor values;                     // float32 (rows, columns)
};
CsvTable parse_csv(std::string_view text, const std::string& name, const CsvOptions& options = {});
CsvTable read_csv(const std::string& path, const CsvOptions& options = {});

// NumPy .npy (format 1.0, 2.0 and 3.0), C order, little-endian float32, float64 (read as
// float32), uint8, int32 and int64 (read as int32, values checked to fit).
Tensor parse_npy(std::string_view bytes, const std::string& name);
Tensor read_npy(const std::string& path);

}  // namespace tandem::data
