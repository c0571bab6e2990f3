#pragma once
// Who connects to a task's bound ZeroMQ socket (the chief's and each server's ROUTER). ZeroMQ
// shows Tandem messages, never connections: a stranger that sends nothing, or bytes that are not
// ZeroMQ's protocol, is dropped by ZeroMQ unseen. The watch reads the socket's monitor events on a
// thread of its own and names in the log, as refused, each connection accepted whose handshake
// never succeeded, with the address it came from: one that said nothing within the handshake
// interval, one that spoke no ZeroMQ, one whose key was refused, one still there at the end.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <zmq.hpp>

namespace tandem::distribute::ps {

class ConnectionWatch {
 public:
  // `socket`: bound, or to be bound, by the calling thread, which also destroys the watch before
  // the socket. `who`: the task, for the log ("ps:0 (127.0.0.1:2223)"). `handshake`: the socket's
  // handshake interval (ZMQ_HANDSHAKE_IVL), set here: a silent connection is dropped after it.
  ConnectionWatch(zmq::context_t& context, zmq::socket_t& socket, std::string who, std::chrono::milliseconds handshake);
  ~ConnectionWatch();
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;
  int64_t refused() const { return refused_.load(); }  // connections refused so far
  // Ends the watch (the destructor's, sooner): those still waiting for their handshake are named
  // as refused; on the socket's thread.
  void stop();

  // Refusals named one by one in the log: the first ten, then every thousandth.
  static constexpr int64_t kNamedRefusals = 10;

 private:
  void run();
  zmq::socket_t& socket_;
  std::string who_, endpoint_;
  zmq::socket_t events_;  // the monitor's events: the thread's
  std::chrono::milliseconds handshake_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

}  // namespace tandem::distribute::ps
