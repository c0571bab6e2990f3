#pragma once
// Keras' own files at the byte level: zip archives (a .keras file is one) and Keras 3's HDF5
// weights layout (model.weights.h5, *.weights.h5). Which variables go where is the model's
// business (src/fit/keras_files.cpp); here are only archives, groups and arrays.
#include <string>
#include <string_view>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::io {

struct ZipEntry {
  std::string name;
  std::string data;
};

// A zip archive of `entries`, each stored (uncompressed, as Keras writes them), CRC-32 set.
std::string encode_zip(const std::vector<ZipEntry>& entries);
// Every entry of a zip archive; stored and deflated entries, CRC-32 checked. Anything else (not a
// zip, truncated, zip64, encrypted, another method, a bad CRC) is a tandem::Error naming `source`,
// the entry and what was found.
std::vector<ZipEntry> decode_zip(std::string_view bytes, const std::string& source);

// One "vars" group of Keras 3's weights file: `<path>/vars` ("vars" at the top when path is
// empty), its datasets "0", "1", ... in order, and the attribute "name" Keras writes on it.
// float32 tensors are written as float32; int32 ones as int64, as Keras' TensorFlow backend writes
// its integer variables (the optimizer's iteration count). A tensor of rank 0 is a scalar dataset.
struct KerasVars {
  std::string path;  // "", "layers/dense", "optimizer"
  std::string name;  // the "name" attribute ("" to write none)
  std::vector<Tensor> values;
};

// The HDF5 file's bytes (written through HDF5's in-memory driver).
std::string encode_keras_weights(const std::vector<KerasVars>& groups);
// Every "vars" group of an HDF5 file, in path order: floating datasets read as float32, integer
// ones as int32. A dataset not named by its index, indices with gaps, links other than hard
// ones, other types and damaged files are tandem::Errors naming `source` and the path.
std::vector<KerasVars> decode_keras_weights(std::string_view bytes, const std::string& source);
// Whether `bytes` begin with HDF5's signature.
bool is_hdf5(std::string_view bytes);

}  // namespace tandem::io
