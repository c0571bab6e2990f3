// safetensors files: u64 LE header length | JSON header | data. Tensors are written in order,
// back to back, so that the offsets cover the data exactly, as the format's readers require.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "tandem/io.h"

namespace tandem::io {
namespace {

using nlohmann::json;

const char* dtype_tag(DType d) {
  switch (d) {
    case DType::Float32: return "F32";
    case DType::Int32: return "I32";
    case DType::UInt8: return "U8";
  }
  return "?";
}

std::string checksum_key(const std::string& name) { return "crc32c:" + name; }

}  // namespace

std::string encode_safetensors(const TensorFile& file) {
  json header = json::object();
  json metadata = json::object();
  for (const auto& [k, v] : file.metadata) metadata[k] = v;
  std::vector<Tensor> contiguous;
  size_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    if (name == "__metadata__" || header.contains(name))
      fail("safetensors: duplicate or reserved tensor name \"{}\"", name);
    Tensor t = tensor.to(Device::cpu()).contiguous();  // a device's tensors are written from a host copy
    size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    header[name] = {{"dtype", dtype_tag(t.dtype())},
                    {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
                    {"data_offsets", {offset, offset + bytes}}};
    metadata[checksum_key(name)] = fmt::format("{:08x}", crc32c(t.raw(), bytes));
    offset += bytes;
    contiguous.push_back(t);
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format's recommended 8-byte alignment
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += text;
  out.reserve(out.size() + offset);
  for (const Tensor& t : contiguous)
    out.append(static_cast<const char*>(t.raw()), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
  return out;
}

void save_safetensors(const std::string& path, const TensorFile& file) {
  write_file_atomically(path, encode_safetensors(file));
}

TensorFile load_safetensors(const std::string& path) {
  std::string bytes = read_file(path);
  if (bytes.size() < 8)
    fail("safetensors: \"{}\" is truncated at byte offset {}: the 8-byte header length is missing", path, bytes.size());
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (header_size > bytes.size() - 8)
    fail("safetensors: \"{}\" byte offset 0: header length {} exceeds the {} bytes that follow", path, header_size,
         bytes.size() - 8);
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_size));
  } catch (const json::parse_error& e) {
    fail("safetensors: \"{}\" has a malformed JSON header near byte offset {}: {}", path, 8 + e.byte, e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for any type
    fail("safetensors: \"{}\" has a malformed JSON header (byte offsets 8 to {}): {}", path, 8 + header_size, e.what());
  }
  if (!header.is_object()) fail("safetensors: \"{}\" header at byte offset 8 is not a JSON object", path);
  const size_t data_start = 8 + header_size;
  const size_t data_size = bytes.size() - data_start;
  TensorFile file;
  if (header.contains("__metadata__")) {
    const json& m = header["__metadata__"];
    if (!m.is_object()) fail("safetensors: \"{}\": __metadata__ is not an object", path);
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string()) fail("safetensors: \"{}\": metadata \"{}\" is not a string", path, it.key());
      file.metadata[it.key()] = it.value().get<std::string>();
    }
  }
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const json& e = it.value();
    auto bad = [&](const std::string& what) {
      fail("safetensors: \"{}\": tensor \"{}\" (header at byte offset 8): {}", path, name, what);
    };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      bad("needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) bad("dtype is not a string");
    std::string dtype = e["dtype"].get<std::string>();
    DType dt;
    if (dtype == "F32") dt = DType::Float32;
    else if (dtype == "I32") dt = DType::Int32;
    else if (dtype == "U8") dt = DType::UInt8;
    else bad(fmt::format("dtype {} is not supported (expected F32, I32 or U8)", dtype));
    if (!e["shape"].is_array() || e["shape"].size() > Shape::kMaxRank) bad("shape must be an array of at most 8 sizes");
    Shape shape;
    uint64_t elements = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 32)) bad("shape holds an invalid size");
      elements *= std::max<uint64_t>(d.get<uint64_t>(), 1);
      if (elements > (uint64_t{1} << 34)) bad("shape describes more than 2^34 elements");
      shape.push_back(d.get<int64_t>());
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    uint64_t expected = static_cast<uint64_t>(shape.numel()) * dtype_size(dt);
    if (end < begin || end > data_size)
      bad(fmt::format("data_offsets [{}, {}] fall outside the {} data bytes (file byte offset {})", begin, end,
                      data_size, data_start + std::min<uint64_t>(end, data_size)));
    if (end - begin != expected)
      bad(fmt::format("data_offsets span {} bytes, shape {} of {} needs {}", end - begin, shape.str(), dtype,
                      expected));
    ranges.emplace_back(begin, end);
    Tensor t = Tensor::empty(shape, dt);
    std::memcpy(t.raw(), bytes.data() + data_start + begin, expected);
    auto sum = file.metadata.find(checksum_key(name));
    if (sum != file.metadata.end()) {
      std::string actual = fmt::format("{:08x}", crc32c(t.raw(), expected));
      if (actual != sum->second)
        fail(
            "safetensors: \"{}\": tensor \"{}\" is corrupt (file byte offsets {}-{}): CRC-32C {} but the header "
            "records {}",
            path, name, data_start + begin, data_start + end, actual, sum->second);
    } else if (file.metadata.count("format") && file.metadata["format"] == "tandem") {
      bad("has no checksum in a Tandem checkpoint");
    }
    file.tensors.emplace_back(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      fail("safetensors: \"{}\": tensors overlap at data byte {}", path, ranges[i].first);
  // Written order is offset order; keep that so that state lists come back as saved.
  std::sort(file.tensors.begin(), file.tensors.end(), [&](const auto& a, const auto& b) {
    return header[a.first]["data_offsets"][0].template get<uint64_t>() <
           header[b.first]["data_offsets"][0].template get<uint64_t>();
  });
  return file;
}

}  // namespace tandem::io
