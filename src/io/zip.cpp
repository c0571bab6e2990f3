// Zip archives (PKWARE's APPNOTE): local headers, the central directory, its end record. Written
// stored; read stored or deflated (zlib's raw inflate), every size and offset checked against the
// bytes before it is used.
#include <zlib.h>

#include <cstring>
#include <ctime>

#include "tandem/keras_io.h"

namespace tandem::io {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;

void put16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

uint32_t get16(std::string_view b, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8;
}
uint32_t get32(std::string_view b, size_t at) { return get16(b, at) | get16(b, at + 2) << 16; }

uint32_t crc_of(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < data.size()) {  // crc32 takes a uInt length
    auto n = static_cast<uInt>(std::min<size_t>(data.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), n);
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

// MS-DOS time and date of now (local time), as zip tools write them.
std::pair<uint32_t, uint32_t> dos_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  uint32_t time = static_cast<uint32_t>(tm.tm_hour << 11 | tm.tm_min << 5 | tm.tm_sec / 2);
  uint32_t date = static_cast<uint32_t>(std::max(tm.tm_year - 80, 0) << 9 | (tm.tm_mon + 1) << 5 | tm.tm_mday);
  return {time, date};
}

std::string inflate_raw(std::string_view in, size_t size, const std::string& where) {
  std::string out(size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail("{}: zlib cannot start inflating", where);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&z, Z_FINISH);
  size_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != size)
    fail("{}: its deflated data is damaged (zlib: {}, {} of {} bytes)", where, z.msg ? z.msg : std::to_string(rc),
         produced, size);
  return out;
}

}  // namespace

std::string encode_zip(const std::vector<ZipEntry>& entries) {
  // Named copies, not a structured binding: clang 14's lambdas cannot capture one.
  const std::pair<uint32_t, uint32_t> now = dos_now();
  const uint32_t time = now.first, date = now.second;
  std::string out, central;
  for (const ZipEntry& e : entries) {
    if (e.data.size() >= 0xffffffffu || out.size() >= 0xffffffffu)
      fail("zip: entry \"{}\" ({} bytes) needs zip64, which Tandem does not write", e.name, e.data.size());
    uint32_t crc = crc_of(e.data), size = static_cast<uint32_t>(e.data.size());
    auto offset = static_cast<uint32_t>(out.size());
    auto header = [&](std::string& h, bool local) {
      put32(h, local ? kLocalSig : kCentralSig);
      if (!local) put16(h, 20);  // made by: MS-DOS attributes, version 2.0
      put16(h, 20);              // needed to extract: 2.0
      put16(h, 0);               // flags
      put16(h, 0);               // stored
      put16(h, time);
      put16(h, date);
      put32(h, crc);
      put32(h, size);
      put32(h, size);
      put16(h, static_cast<uint32_t>(e.name.size()));
      put16(h, 0);  // extra field length
      if (!local) {
        put16(h, 0);       // comment length
        put16(h, 0);       // disk number
        put16(h, 0);       // internal attributes
        put32(h, 0);       // external attributes
        put32(h, offset);  // local header's offset
      }
      h += e.name;
    };
    header(out, true);
    out += e.data;
    header(central, false);
  }
  auto central_offset = static_cast<uint32_t>(out.size());
  out += central;
  put32(out, kEndSig);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(entries.size()));
  put16(out, static_cast<uint32_t>(entries.size()));
  put32(out, static_cast<uint32_t>(central.size()));
  put32(out, central_offset);
  put16(out, 0);  // comment length
  return out;
}

std::vector<ZipEntry> decode_zip(std::string_view b, const std::string& source) {
  // The end record: 22 bytes, then a comment of up to 65535 bytes.
  size_t end = std::string_view::npos;
  if (b.size() >= 22)
    for (size_t at = b.size() - 22;; --at) {
      if (get32(b, at) == kEndSig && at + 22 + get16(b, at + 20) == b.size()) {
        end = at;
        break;
      }
      if (at == 0 || b.size() - at > 22 + 0xffff) break;
    }
  if (end == std::string_view::npos) {
    if (b.size() >= 4 && get32(b, 0) == kLocalSig)
      fail("\"{}\" is a damaged zip archive: it has no end-of-central-directory record (truncated?)", source);
    fail("\"{}\" is not a zip archive ({} bytes, no end-of-central-directory record)", source, b.size());
  }
  uint32_t count = get16(b, end + 10), cd_size = get32(b, end + 12), cd_offset = get32(b, end + 16);
  if (count == 0xffff || cd_offset == 0xffffffffu)
    fail("\"{}\" is a zip64 archive, which Tandem does not read", source);
  if (static_cast<uint64_t>(cd_offset) + cd_size > end)
    fail("\"{}\" is a damaged zip archive: its central directory ({} bytes at {}) runs past its end record at {}",
         source, cd_size, cd_offset, end);
  std::vector<ZipEntry> out;
  size_t at = cd_offset;
  for (uint32_t i = 0; i < count; ++i) {
    if (at + 46 > cd_offset + static_cast<size_t>(cd_size) || get32(b, at) != kCentralSig)
      fail("\"{}\" is a damaged zip archive: central directory entry {} of {} is missing", source, i, count);
    uint32_t flags = get16(b, at + 8), method = get16(b, at + 10), crc = get32(b, at + 16);
    uint32_t csize = get32(b, at + 20), usize = get32(b, at + 24);
    uint32_t name_len = get16(b, at + 28), extra_len = get16(b, at + 30), comment_len = get16(b, at + 32);
    uint32_t local = get32(b, at + 42);
    if (at + 46 + name_len > b.size())
      fail("\"{}\" is a damaged zip archive: entry {}'s name runs past the end", source, i);
    std::string name(b.substr(at + 46, name_len));
    at += 46 + name_len + extra_len + comment_len;
    std::string where = fmt::format("\"{}\", entry \"{}\"", source, name);
    if (csize == 0xffffffffu || usize == 0xffffffffu || local == 0xffffffffu)
      fail("{}: zip64 sizes, which Tandem does not read", where);
    if (flags & 1u) fail("{}: encrypted, which Tandem does not read", where);
    if (method != 0 && method != 8)
      fail("{}: compression method {}; Tandem reads stored (0) and deflated (8) entries", where, method);
    if (static_cast<uint64_t>(local) + 30 > b.size() || get32(b, local) != kLocalSig)
      fail("{}: no local header at offset {} (damaged or truncated)", where, local);
    uint64_t start = static_cast<uint64_t>(local) + 30 + get16(b, local + 26) + get16(b, local + 28);
    if (start + csize > cd_offset)
      fail("{}: its {} bytes of data at offset {} run past the data area ({} bytes; truncated?)", where, csize, start,
           cd_offset);
    std::string_view raw = b.substr(start, csize);
    ZipEntry e{name, {}};
    if (method == 0) {
      if (csize != usize) fail("{}: stored, yet {} bytes hold {} bytes", where, csize, usize);
      e.data = std::string(raw);
    } else {
      // Deflate expands at most about 1032 times: more is a damaged header or a bomb.
      if (usize > 1032ull * csize + 1024)
        fail("{}: {} deflated bytes claim to hold {} bytes; refused", where, csize, usize);
      e.data = inflate_raw(raw, usize, where);
    }
    if (uint32_t actual = crc_of(e.data); actual != crc)
      fail("{}: CRC-32 is {:08x}, the archive says {:08x} (damaged)", where, actual, crc);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace tandem::io
