// The connections to a bound ZeroMQ socket, watched (connection_watch.h).
//
// ZeroMQ (libzmq 4.3) tells a connection's story by events: ACCEPTED (its file descriptor), then
// HANDSHAKE_SUCCEEDED (no descriptor: its value is 0), or a HANDSHAKE_FAILED_* (a reason) and
// DISCONNECTED (the descriptor); a peer's connection also ends with a DISCONNECTED, without a
// failure before it. One I/O thread emits a socket's events in order, so a failure is the reason
// of the DISCONNECTED that comes next. A success is given to the connection it must be: one still
// open (its address as at its ACCEPTED) that has received at least ZeroMQ's greeting (64 bytes;
// TCP_INFO), the oldest such; one that cannot be found (its connection closed already) is kept
// for the next DISCONNECTED that has no failure before it. The peer's address is read
// (getpeername) as the ACCEPTED event is read. A stranger whose first bytes came with its
// connection, and are not ZeroMQ's, is refused by ZeroMQ's I/O thread within microseconds, with a
// reset (what it sent is unread): this thread, woken by the event, may find it gone, or its number
// already another connection's (run: a connection whose DISCONNECTED had come by the time its
// address was read), and then names it as from "an address gone before it could be read" (ZeroMQ
// 4.3's events carry the socket's own address, never the peer's; its versioned monitor, which
// gives both, is a draft API). It is refused and counted all the same.
#include "distribute/ps/connection_watch.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tandem/error.h"

namespace tandem::distribute::ps {
namespace {

using Clock = std::chrono::steady_clock;

std::string peer_address(int fd) {
  sockaddr_in at{};
  socklen_t length = sizeof at;
  char host[INET_ADDRSTRLEN] = "";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&at), &length) != 0 || at.sin_family != AF_INET ||
      inet_ntop(AF_INET, &at.sin_addr, host, sizeof host) == nullptr)
    return {};
  return fmt::format("{}:{}", host, ntohs(at.sin_port));
}

// The bytes connection `fd` has received (-1: not known).
int64_t bytes_received(int fd) {
  tcp_info info{};
  socklen_t length = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0 ||
      length < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
    return -1;
  return static_cast<int64_t>(info.tcpi_bytes_received);
}

constexpr int64_t kGreetingBytes = 64;  // ZMTP 3's greeting, before any handshake command

std::atomic<int64_t> watches{0};  // a distinct inproc endpoint for each watch

}  // namespace

ConnectionWatch::ConnectionWatch(zmq::context_t& context, zmq::socket_t& socket, std::string who,
                                 std::chrono::milliseconds handshake)
    : socket_(socket), who_(std::move(who)), handshake_(handshake) {
  socket_.set(zmq::sockopt::handshake_ivl, static_cast<int>(handshake_.count()));
  // A ZAP domain makes ZeroMQ refuse an unversioned (ZMTP 1.0) peer at its first byte, as it does
  // under CurveZMQ: any byte but 0xff opens such a greeting, so without it garbage would be taken
  // for one, past every handshake timer, its bytes decoded as messages. Tandem's peers speak ZMTP
  // 3; with no ZAP handler in the context (no --auth) ZeroMQ lets them in unasked.
  if (socket_.get(zmq::sockopt::zap_domain).empty()) socket_.set(zmq::sockopt::zap_domain, "tandem");
  endpoint_ = fmt::format("inproc://tandem.connection-watch.{}", watches.fetch_add(1));
  constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                          ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                          ZMQ_EVENT_DISCONNECTED;
  if (zmq_socket_monitor(socket_.handle(), endpoint_.c_str(), kEvents) != 0)
    fail("{}: cannot watch the connections to its ZeroMQ socket ({}): {}", who_, endpoint_, zmq_strerror(zmq_errno()));
  // Connected here, before any connection can come (ZeroMQ's I/O thread blocks sending an event
  // until a reader is connected), then the thread's alone (a thread's start is a full barrier).
  events_ = zmq::socket_t(context, zmq::socket_type::pair);
  events_.set(zmq::sockopt::linger, 0);
  events_.connect(endpoint_);
  thread_ = std::thread([this] { run(); });
}

ConnectionWatch::~ConnectionWatch() { stop(); }

// The monitor is stopped first, while the thread still reads: ZeroMQ's I/O thread sends each
// event blocking, so an event sent once the reader is gone would hold it (and this thread, whose
// zmq_socket_monitor waits for the same lock) forever (libzmq issue 3575).
void ConnectionWatch::stop() {
  if (!thread_.joinable()) return;
  zmq_socket_monitor(socket_.handle(), nullptr, 0);  // on the socket's own thread: no more events
  stop_ = true;
  thread_.join();
  events_.close();
}

void ConnectionWatch::run() {
  struct Accepted {
    int fd;
    std::string from;  // empty: gone before it could be read
    Clock::time_point at;
  };
  std::vector<Accepted> waiting;  // accepted, no handshake known yet, oldest first
  std::map<int, Accepted> peers;  // by fd: those given a success, until their DISCONNECTED
  // The next DISCONNECTED's handshake failure (a HANDSHAKE_FAILED_*), and its reason (empty: the
  // connection closed or timed out, told apart by the time it took).
  bool failed = false;
  std::string failure;
  int64_t unclaimed = 0;  // successes whose connection is still among `waiting`
  auto refuse = [&](const Accepted& a, const std::string& why) {
    int64_t n = ++refused_;
    std::string from = a.from.empty() ? "an address gone before it could be read" : a.from;
    if (n <= kNamedRefusals || n % 1000 == 0)
      std::fprintf(stderr, "%s: refused a ZeroMQ connection from %s: %s (refusal %lld)\n", who_.c_str(), from.c_str(),
                   why.c_str(), static_cast<long long>(n));
  };
  auto find = [&](int fd) {
    return std::find_if(waiting.begin(), waiting.end(), [fd](const Accepted& a) { return a.fd == fd; });
  };
  double interval = std::chrono::duration<double>(handshake_).count();
  zmq::socket_t& events = events_;
  std::vector<std::pair<uint16_t, uint32_t>> batch;  // (event, value), as they came
  std::vector<std::string> from;                     // each ACCEPTED's peer address as read
  size_t checked = 0;                                // batch[0, checked): a drain came after their reads
  auto drain = [&](std::vector<std::pair<uint16_t, uint32_t>>& into) {
    for (zmq::message_t head; events.recv(head, zmq::recv_flags::dontwait); head = zmq::message_t()) {
      zmq::message_t address;
      if (head.more()) (void)events.recv(address, zmq::recv_flags::dontwait);
      if (head.size() < 6) continue;
      uint16_t event = 0;
      uint32_t value = 0;
      std::memcpy(&event, head.data(), 2);
      std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
      into.emplace_back(event, value);
    }
  };
  // Once stopped, what is queued still comes (a connection dropped as the job ended).
  for (;;) {
    bool stopping = stop_.load();
    zmq::pollitem_t item{events.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(stopping ? 0 : 50)) == 0) {
      if (stopping) break;
      continue;
    }
    // Every event queued, each ACCEPTED's peer address read, then the queue again, until nothing
    // new came: a connection closed before its address was read was closed before the read (the
    // one I/O thread closes it and says DISCONNECTED before it can accept another that takes its
    // number), so its DISCONNECTED is among these; its address is then not known for sure (the
    // number may be another connection's by the read) and it is named as gone. Past kRounds (a
    // flood) the addresses last read stay unchecked: gone as well.
    batch.clear();
    from.clear();
    checked = 0;
    constexpr int kRounds = 64;
    for (int round = 0;; ++round) {
      size_t before = batch.size();
      drain(batch);
      if (round > 0 && batch.size() == before) break;
      from.resize(batch.size());
      if (round == kRounds) break;
      for (size_t i = before; i < batch.size(); ++i)
        if (batch[i].first == ZMQ_EVENT_ACCEPTED) from[i] = peer_address(static_cast<int>(batch[i].second));
      checked = batch.size();
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      const uint16_t event = batch[i].first;  // (not a structured binding: a lambda below takes value)
      const uint32_t value = batch[i].second;
      auto fd = static_cast<int>(value);
      switch (event) {
        case ZMQ_EVENT_ACCEPTED: {
          if (auto old = find(fd); old != waiting.end()) waiting.erase(old);  // its DISCONNECTED lost: never so
          bool closed =
              i >= checked ||
              std::any_of(batch.begin() + static_cast<std::ptrdiff_t>(i) + 1, batch.end(), [&](const auto& e) {
                return (e.first == ZMQ_EVENT_DISCONNECTED || e.first == ZMQ_EVENT_ACCEPTED) && e.second == value;
              });
          waiting.push_back({fd, closed ? std::string() : from[i], Clock::now()});
          break;
        }
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: {
          failed = false;
          failure.clear();
          auto peer = std::find_if(waiting.begin(), waiting.end(), [](const Accepted& a) {
            return !a.from.empty() && peer_address(a.fd) == a.from && bytes_received(a.fd) >= kGreetingBytes;
          });
          if (peer == waiting.end()) {
            ++unclaimed;
          } else {
            peers[peer->fd] = *peer;
            waiting.erase(peer);
          }
          break;
        }
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
          failed = true;
          failure.clear();
          break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
          failed = true;
          failure = fmt::format("a ZeroMQ protocol error in its handshake (ZMTP error 0x{:x})", value);
          break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
          failed = true;
          failure = fmt::format("its key was refused (ZAP status {})", value);
          break;
        case ZMQ_EVENT_DISCONNECTED: {
          bool handshake_failed = std::exchange(failed, false);
          std::string why = std::exchange(failure, std::string());
          auto it = find(fd);
          if (it == waiting.end()) {
            auto peer = peers.find(fd);
            if (peer == peers.end()) break;
            Accepted a = peer->second;
            peers.erase(peer);
            if (!handshake_failed) break;  // a peer's, after its handshake
            // A failed handshake given another's success: refused, and that success is still to find.
            ++unclaimed;
            it = waiting.insert(waiting.end(), a);
          } else if (!handshake_failed && unclaimed > 0) {  // no failure said: a peer whose success was not found
            --unclaimed;
            waiting.erase(it);
            break;
          }
          double took = std::chrono::duration<double>(Clock::now() - it->at).count();
          if (!handshake_failed) why = "its first bytes are not ZeroMQ's (ZMTP 3) greeting";
          else if (why.empty() && took >= interval * 0.9)
            why = fmt::format("no ZeroMQ handshake within {} s (it said nothing, or too little)", interval);
          else if (why.empty()) why = fmt::format("it closed after {:.1f} s, before its ZeroMQ handshake", took);
          refuse(*it, why);
          waiting.erase(it);
          break;
        }
        default: break;
      }
    }
  }
  // Those still waiting as the job ends, but the peers whose success was not found (open, past
  // ZeroMQ's greeting).
  for (const Accepted& a : waiting) {
    if (unclaimed > 0 && !a.from.empty() && peer_address(a.fd) == a.from && bytes_received(a.fd) >= kGreetingBytes) {
      --unclaimed;
      continue;
    }
    refuse(a, "the job ended before its ZeroMQ handshake");
  }
}

}  // namespace tandem::distribute::ps
