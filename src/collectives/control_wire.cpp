// The control connections' wire and sockets (control_wire.h), and where rank 0 listens
// (control_plane.h's local_addresses and listen_address).
#include "collectives/control_wire.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "collectives/control_plane.h"
#include "tandem/error.h"

namespace tandem::distribute::detail {

std::vector<std::string> local_addresses() {
  std::vector<std::string> out, loopback;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      (std::string(text).starts_with("127.") ? loopback : out).push_back(text);
    }
    freeifaddrs(list);
  }
  out.insert(out.end(), loopback.begin(), loopback.end());
  return out;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1" || host == "[::1]";
}

std::string listen_address(const std::vector<std::string>& hosts, bool bind_own_host) {
  bool local = true;
  for (const std::string& h : hosts) local = local && (h == hosts[0] || is_loopback_host(h));
  if (local) return "127.0.0.1";
  if (!bind_own_host) return {};
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(hosts[0].c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
    fail("control connection: rank 0's host \"{}\" has no IPv4 address to listen on", hosts[0]);
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  freeaddrinfo(found);
  return text;
}

// A connected socket to address:port within `limit`, or -1.
int connect_to(const std::string& address, int port, std::chrono::milliseconds limit) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &to.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int error = 0;
  socklen_t length = sizeof error;
  if (poll(&p, 1, static_cast<int>(limit.count())) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 ||
      error != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

std::string read_exactly(int fd, size_t n, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  std::string out(n, '\0');
  size_t at = 0;
  while (at < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) < 0) return {};
    ssize_t got = recv(fd, out.data() + at, n - at, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return {};
    if (got > 0) at += static_cast<size_t>(got);
  }
  return out;
}

void write_all_blocking(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
      continue;
    }
    if (n <= 0) fail("control connection: send failed: {}", std::strerror(errno));
    at += static_cast<size_t>(n);
  }
}

std::string frame(uint32_t type, const std::string& payload) {
  std::string out(8, '\0');
  auto length = static_cast<uint32_t>(payload.size());
  std::memcpy(out.data(), &type, 4);
  std::memcpy(out.data() + 4, &length, 4);
  return out + payload;
}

}  // namespace tandem::distribute::detail
