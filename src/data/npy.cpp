// NumPy .npy: "\x93NUMPY", version, header length (u16 for 1.0, u32 after), a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, then the data.
#include <algorithm>
#include <cstring>
#include <limits>

#include "tandem/data/loaders.h"
#include "tandem/io.h"

namespace tandem::data {
namespace {

// The value text of `key` in the header dict, or fails.
std::string dict_value(const std::string& header, const std::string& key, const std::string& name) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) fail("npy: \"{}\" header lacks '{}' (header: {})", name, key, header);
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) fail("npy: \"{}\" header has no value for '{}'", name, key);
  size_t b = header.find_first_not_of(' ', colon + 1);
  if (b == std::string::npos) fail("npy: \"{}\" header has no value for '{}'", name, key);
  size_t e = header[b] == '(' ? header.find(')', b) + 1 : header.find_first_of(",}", b);
  if (e == std::string::npos || e == 0) fail("npy: \"{}\" header value of '{}' is not terminated", name, key);
  return header.substr(b, e - b);
}

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    fail("npy: \"{}\" byte offset 0: not a .npy file (expected the magic \\x93NUMPY)", name);
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  if (major < 1 || major > 3)
    fail("npy: \"{}\" byte offset 6: format version {} is not supported (1 to 3)", name, major);
  size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) fail("npy: \"{}\" is truncated at byte offset {}", name, bytes.size());
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= size_t{static_cast<uint8_t>(bytes[8 + i])} << (8 * i);
  size_t data_start = 8 + length_bytes + header_len;
  if (data_start > bytes.size())
    fail("npy: \"{}\" byte offset 8: header length {} runs past the end of the file ({} bytes)", name, header_len,
         bytes.size());
  std::string header(bytes.substr(8 + length_bytes, header_len));
  std::string descr = dict_value(header, "descr", name), order = dict_value(header, "fortran_order", name),
              shape_text = dict_value(header, "shape", name);
  if (order != "False") fail("npy: \"{}\": fortran_order is {}; only C order is supported", name, order);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"'))
    fail("npy: \"{}\": descr {} is not a string", name, descr);
  descr = descr.substr(1, descr.size() - 2);
  size_t item = 0;
  if (descr == "<f4") item = 4;
  else if (descr == "<f8") item = 8;
  else if (descr == "|u1" || descr == "<u1") item = 1;
  else if (descr == "<i4") item = 4;
  else if (descr == "<i8") item = 8;
  else
    fail("npy: \"{}\": dtype '{}' is not supported (expected <f4, <f8, |u1, <i4 or <i8, little-endian)", name, descr);
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')')
    fail("npy: \"{}\": shape {} is not a tuple", name, shape_text);
  Shape shape;
  uint64_t count = 1;
  size_t p = 1;
  while (p < shape_text.size() - 1) {
    while (p < shape_text.size() - 1 && (shape_text[p] == ' ' || shape_text[p] == ',')) ++p;
    if (p >= shape_text.size() - 1) break;
    size_t q = p;
    uint64_t d = 0;
    while (q < shape_text.size() - 1 && shape_text[q] >= '0' && shape_text[q] <= '9') {
      d = d * 10 + static_cast<uint64_t>(shape_text[q] - '0');
      if (d > (uint64_t{1} << 40)) fail("npy: \"{}\": shape {} holds a dimension that is too large", name, shape_text);
      ++q;
    }
    if (q == p) fail("npy: \"{}\": shape {} holds something other than sizes", name, shape_text);
    count *= std::max<uint64_t>(d, 1);
    if (count > (uint64_t{1} << 34) || shape.rank() == Shape::kMaxRank)
      fail("npy: \"{}\": shape {} is too large (or has more than 8 axes)", name, shape_text);
    shape.push_back(static_cast<int64_t>(d));
    p = q;
  }
  uint64_t need = static_cast<uint64_t>(shape.numel()) * item;
  if (bytes.size() - data_start != need)
    fail("npy: \"{}\" byte offset {}: shape {} of {} needs {} data bytes, the file has {}", name, data_start,
         shape.str(), descr, need, bytes.size() - data_start);
  const char* d = bytes.data() + data_start;
  int64_t n = shape.numel();
  if (descr == "<f4") {
    Tensor t = Tensor::empty(shape);
    std::memcpy(t.raw(), d, need);
    return t;
  }
  if (descr == "<f8") {
    Tensor t = Tensor::empty(shape);
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, d + 8 * i, 8);
      t.data<float>()[i] = static_cast<float>(v);
    }
    return t;
  }
  if (item == 1) {
    Tensor t = Tensor::empty(shape, DType::UInt8);
    std::memcpy(t.raw(), d, need);
    return t;
  }
  Tensor t = Tensor::empty(shape, DType::Int32);
  for (int64_t i = 0; i < n; ++i) {
    if (item == 4) {
      std::memcpy(t.data<int32_t>() + i, d + 4 * i, 4);
      continue;
    }
    int64_t v;
    std::memcpy(&v, d + 8 * i, 8);
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      fail("npy: \"{}\" byte offset {}: int64 value {} does not fit int32", name,
           data_start + 8 * static_cast<size_t>(i), v);
    t.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  return t;
}

Tensor read_npy(const std::string& path) { return parse_npy(io::read_file(path), path); }

}  // namespace tandem::data
