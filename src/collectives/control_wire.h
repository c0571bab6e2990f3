#pragma once
// The control plane's wire (collectives/control_plane.h): each message is a type and a length
// (4 bytes each, this machine's order: every rank is the same program) and a payload, over TCP, sealed (control_channel.h).
#include <chrono>
#include <cstdint>
#include <string>

namespace tandem::distribute::detail {

enum : uint32_t { kHello = 1, kBeat = 2, kTable = 3, kFail = 4, kBye = 5, kDone = 6 };

// A message's bytes: its type, the payload's length, the payload.
std::string frame(uint32_t type, const std::string& payload);
// A connected socket (non-blocking, no Nagle) to address:port within `limit`, or -1.
int connect_to(const std::string& address, int port, std::chrono::milliseconds limit);
// `n` bytes from `fd` within `limit` ("" when fewer came: closed, or late).
std::string read_exactly(int fd, size_t n, std::chrono::milliseconds limit);
// All of `bytes` on `fd`, waiting while the socket is full (an Error when the connection fails).
void write_all_blocking(int fd, const std::string& bytes);

}  // namespace tandem::distribute::detail
