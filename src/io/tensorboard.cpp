// TensorBoard event files: TFRecord framing around Event protocol buffers, encoded by hand.
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tandem/io.h"

namespace tandem::io {
namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field << 3 | wire_type));
}

template <typename T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian machine, as protobuf's fixed types
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_header(int64_t step) {
  std::string e;
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  put_tag(e, 1, 1);
  put_fixed(e, now);
  put_tag(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

std::string tfrecord(std::string_view data) {
  std::string out;
  uint64_t length = data.size();
  put_fixed(out, length);
  put_fixed(out, masked_crc32c(out.data(), 8));
  out.append(data);
  put_fixed(out, masked_crc32c(data.data(), data.size()));
  return out;
}

EventWriter::EventWriter(const std::string& directory) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) fail("TensorBoard: cannot create log directory \"{}\": {}", directory, ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", directory, seconds, host, ::getpid());
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) fail("TensorBoard: cannot create \"{}\": {}", path_, std::strerror(errno));
  std::string e = event_header(0);
  put_bytes(e, 3, "brain.Event:2");
  write_event(e);
  flush();
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::write_event(const std::string& event) {
  std::string record = tfrecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    fail("TensorBoard: writing \"{}\" failed: {}", path_, std::strerror(errno));
}

void EventWriter::add_scalar(const std::string& tag, float value, int64_t step) {
  std::string v;
  put_bytes(v, 1, tag);
  put_tag(v, 2, 5);
  put_fixed(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(step);
  put_bytes(e, 5, summary);
  write_event(e);
}

void EventWriter::flush() {
  if (std::fflush(file_) != 0) fail("TensorBoard: flushing \"{}\" failed: {}", path_, std::strerror(errno));
}

}  // namespace tandem::io
