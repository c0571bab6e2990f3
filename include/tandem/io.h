#pragma once
// Durable files: CRC32C, atomic replacement, and safetensors tensor files with checksums.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::io {

// CRC-32C (Castagnoli), as TFRecord and the checkpoint checksums use it.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masked form: rotate right by 15 and add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

// Replaces `path` with `bytes` so that a crash leaves either the old file or the new one:
// write a temporary file beside it, fsync it, rename it over, fsync the directory.
void write_file_atomically(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct TensorFile {
  NamedTensors tensors;                         // float32 and int32
  std::map<std::string, std::string> metadata;  // "__metadata__" (string to string)
};

// safetensors: u64 little-endian header size, JSON header, raw little-endian data. Each tensor's
// CRC-32C goes into the metadata as "crc32c:<name>" and is verified on load.
std::string encode_safetensors(const TensorFile& file);
void save_safetensors(const std::string& path, const TensorFile& file);
// Every malformation (bad header, offsets out of range or overlapping, wrong checksum) is a
// tandem::Error naming the file, the tensor and the byte offset.
TensorFile load_safetensors(const std::string& path);

}  // namespace tandem::io

#include <cstdio>

namespace tandem::io {

// One TFRecord: u64 length, masked CRC-32C of the length, data, masked CRC-32C of the data.
std::string tfrecord(std::string_view data);

// Writes a TensorBoard event file (events.out.tfevents.<seconds>.<host>) in `directory`,
// created if missing: the file_version event, then one Event per scalar.
class EventWriter {
 public:
  explicit EventWriter(const std::string& directory);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  void add_scalar(const std::string& tag, float value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tandem::io
