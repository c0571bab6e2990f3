#pragma once
// Parameter-server messages over ZeroMQ (wire.h's items): an envelope item (the message's type,
// sender, step and aux; no payload) followed by tensor items. Tensors are sent from their own
// memory (the frame keeps a reference until ZeroMQ is done with it). Every receive has a deadline.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "distribute/ps/wire.h"

namespace tandem::distribute::ps {

class Outgoing {
 public:
  // The envelope: what the message is; `sender` the sending task's index among its kind.
  Outgoing(MessageType type, uint32_t sender, int64_t step = 0, int64_t aux = 0);
  // A tensor item (contiguous, on the host), sent without a copy.
  void add(uint32_t variable, uint32_t shard, const Tensor& tensor, int64_t aux = 0);
  void add_text(const std::string& text);  // a uint8 item (a refusal's reason)
  // Sends on `socket` (after `route`: a ROUTER's peer id, when given).
  void send(zmq::socket_t& socket, const std::string* route = nullptr);

 private:
  MessageType type_;
  std::vector<zmq::message_t> frames_;
};

struct Incoming {
  std::string route;  // ROUTER: the sender's id
  // The frames, shared with the tensors that adopt their payloads (Item::adopt).
  std::shared_ptr<std::vector<zmq::message_t>> frames;
  Header envelope;
  std::vector<Item> items;  // the tensor items (views into frames)
};

// The next message on `socket` within `timeout` (nullopt: none came); `router`: the first frame is
// a peer id. A message that does not decode is an Error (wire.h's, naming what was wrong), except
// on a bound (ROUTER) socket, which anyone may reach: there it is dropped and named in the log.
std::optional<Incoming> receive(zmq::socket_t& socket, std::chrono::milliseconds timeout, bool router);
// The messages this process's bound sockets dropped so far.
int64_t messages_dropped();
// Those `socket` dropped so far, forgotten once taken (a task's closing line counts them).
int64_t take_messages_dropped(const zmq::socket_t& socket);

}  // namespace tandem::distribute::ps
