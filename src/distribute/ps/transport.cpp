// Parameter-server messages over ZeroMQ (transport.h).
#include "distribute/ps/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

#include "tandem/error.h"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#endif

namespace tandem::distribute::ps {
namespace {

// Under ThreadSanitizer: a message's sending happens before its receipt. Between threads (an
// in-process cluster's inproc sockets) ZeroMQ hands the frames over through lock-free queues in a
// library TSan does not see into, so without this every frame read by its receiver is reported as
// racing with its writing by the sender.
#if defined(__SANITIZE_THREAD__)
char message_order;
void sent() { __tsan_release(&message_order); }
void received() { __tsan_acquire(&message_order); }
#else
void sent() {}
void received() {}
#endif

zmq::message_t header_frame(const Header& h) {
  auto bytes = encode(h);
  return zmq::message_t(bytes.data(), bytes.size());
}

}  // namespace

Outgoing::Outgoing(MessageType type, uint32_t sender, int64_t step, int64_t aux) : type_(type) {
  frames_.push_back(header_frame({.type = type, .variable = sender, .shard = 0, .step = step, .aux = aux}));
  frames_.emplace_back();
}

void Outgoing::add(uint32_t variable, uint32_t shard, const Tensor& tensor, int64_t aux) {
  if (!tensor.is_contiguous()) fail("parameter-server message: a tensor that is not contiguous");
  frames_.push_back(header_frame({.type = type_,
                                  .variable = variable,
                                  .shard = shard,
                                  .step = 0,
                                  .aux = aux,
                                  .dtype = tensor.dtype(),
                                  .shape = tensor.shape()}));
  size_t bytes = static_cast<size_t>(tensor.numel()) * dtype_size(tensor.dtype());
  if (bytes == 0) {
    frames_.emplace_back();
    return;
  }
  auto* keep = new Tensor(tensor);  // released by ZeroMQ when the frame is sent
  frames_.emplace_back(
      const_cast<void*>(keep->raw()), bytes, [](void*, void* hint) { delete static_cast<Tensor*>(hint); }, keep);
}

void Outgoing::add_text(const std::string& text) {
  frames_.push_back(
      header_frame({.type = type_, .dtype = DType::UInt8, .shape = Shape{static_cast<int64_t>(text.size())}}));
  frames_.emplace_back(text.data(), text.size());
}

void Outgoing::send(zmq::socket_t& socket, const std::string* route) {
  // With a send timeout (the cluster's sockets have one), a peer that never took the connection (not
  // started, or refusing this task's key) is an Error, not a wait without end.
  auto check = [&](std::optional<size_t> sent) {
    if (!sent)
      fail(
          "a {} message could not be sent within {} s: its peer is not connected (not started, or it refused "
          "this task's key under --auth)",
          message_type_name(type_), socket.get(zmq::sockopt::sndtimeo) / 1000.0);
  };
  sent();
  if (route != nullptr) check(socket.send(zmq::buffer(*route), zmq::send_flags::sndmore));
  for (size_t i = 0; i < frames_.size(); ++i)
    check(socket.send(frames_[i], i + 1 < frames_.size() ? zmq::send_flags::sndmore : zmq::send_flags::none));
  frames_.clear();
}

namespace {

Incoming decoded(std::vector<zmq::message_t> frames, bool router) {
  Incoming in;
  size_t first = 0;
  if (router) {
    in.route = frames[0].to_string();
    first = 1;
  }
  in.frames = std::make_shared<std::vector<zmq::message_t>>(std::move(frames));
  std::vector<std::string_view> views;
  for (size_t i = first; i < in.frames->size(); ++i)
    views.emplace_back(static_cast<const char*>((*in.frames)[i].data()), (*in.frames)[i].size());
  if (views.size() < 2)
    fail("parameter-server message: {} frames (at least an envelope and its payload)", views.size());
  std::vector<Item> items = decode_items(views);
  in.envelope = items[0].header;
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i].header.type != in.envelope.type)
      fail("parameter-server message: item {} says {}, the envelope {}", i, message_type_name(items[i].header.type),
           message_type_name(in.envelope.type));
    in.items.push_back(items[i]);
  }
  return in;
}

// Where a message came from, "HOST:PORT" (its connection's socket, while it is open).
std::string peer_of(zmq::message_t& frame) {
  sockaddr_in at{};
  socklen_t length = sizeof at;
  int fd = zmq_msg_get(frame.handle(), ZMQ_SRCFD);
  char host[INET_ADDRSTRLEN] = "";
  if (fd < 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&at), &length) != 0 || at.sin_family != AF_INET ||
      inet_ntop(AF_INET, &at.sin_addr, host, sizeof host) == nullptr)
    return "an unknown address";
  return fmt::format("{}:{}", host, ntohs(at.sin_port));
}

}  // namespace

namespace {
std::atomic<int64_t> dropped{0};
// Each bound socket's drops (an in-process cluster's tasks share the process), by its handle.
std::mutex dropped_mutex;
std::map<const void*, int64_t> dropped_by_socket;
}  // namespace

int64_t messages_dropped() { return dropped.load(); }

int64_t take_messages_dropped(const zmq::socket_t& socket) {
  std::lock_guard lock(dropped_mutex);
  auto it = dropped_by_socket.find(socket.handle());
  if (it == dropped_by_socket.end()) return 0;
  int64_t n = it->second;
  dropped_by_socket.erase(it);
  return n;
}

std::optional<Incoming> receive(zmq::socket_t& socket, std::chrono::milliseconds timeout, bool router) {
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (zmq::poll(&item, 1, std::max(left, std::chrono::milliseconds(0))) == 0) return std::nullopt;
    std::vector<zmq::message_t> frames;
    while (true) {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::none)) return std::nullopt;
      bool more = frame.more();
      frames.push_back(std::move(frame));
      if (!more) break;
    }
    received();
    if (!router) return decoded(std::move(frames), false);
    // A bound socket takes connections from anyone who reaches it: a message that is not a Tandem
    // peer's is dropped and named (the first ten, then every thousandth), never the task's end.
    std::string from = peer_of(frames.back());
    try {
      return decoded(std::move(frames), true);
    } catch (const Error& e) {
      int64_t n = ++dropped;
      {
        std::lock_guard lock(dropped_mutex);
        ++dropped_by_socket[socket.handle()];
      }
      if (n <= 10 || n % 1000 == 0)
        std::fprintf(stderr,
                     "parameter servers: dropped a message from %s that is not a Tandem peer's: %s (drop %lld)\n",
                     from.c_str(), e.what(), static_cast<long long>(n));
    }
  }
}

}  // namespace tandem::distribute::ps
