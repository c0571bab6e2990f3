// A task's links to the rest of its parameter-server cluster (cluster_link.h).
#include "distribute/ps/cluster_link.h"

#include "distribute/ps/auth.h"
#include "distribute/ps/connection_watch.h"

#include <fmt/ranges.h>

#include <csignal>
#include <cstdio>

#include "tandem/error.h"

namespace tandem::distribute::ps {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kSlice{50};

std::string text_of(const Incoming& message) {
  for (const Item& item : message.items)
    if (item.header.dtype == DType::UInt8) return std::string(item.payload);
  return {};
}

}  // namespace

std::vector<TaskId> tasks_in_rank_order(const ClusterSpec& cluster) {
  std::vector<TaskId> out{{"chief", 0}};
  for (int i = 0; i < cluster.count("ps"); ++i) out.push_back({"ps", i});
  for (int i = 0; i < cluster.count("worker"); ++i) out.push_back({"worker", i});
  return out;
}

int control_rank(const ClusterSpec& cluster, const TaskId& task) {
  if (task.type == "chief") return 0;
  if (task.type == "ps") return 1 + task.index;
  return 1 + cluster.count("ps") + task.index;
}

ClusterLink::ClusterLink(const ClusterSpec& cluster, std::chrono::milliseconds timeout, const Keys* keys,
                         std::shared_ptr<zmq::context_t> context, bool workers_may_miss_start)
    : cluster_(cluster),
      timeout_(timeout),
      workers_may_miss_start_(workers_may_miss_start),
      context_(context ? std::move(context) : std::make_shared<zmq::context_t>(1)) {
  if (keys != nullptr) keys_ = std::make_unique<Keys>(*keys);
  const TaskId& me = cluster_.task();
  if (me.type == "chief" || me.type == "ps") {
    cluster_.check_own_port_free();  // named before ZeroMQ's own, terser error
    if (keys != nullptr) authenticator_ = std::make_unique<Authenticator>(*context_, *keys, describe(me));
    own_ = zmq::socket_t(*context_, zmq::socket_type::router);
    own_.set(zmq::sockopt::linger, 0);
    own_.set(zmq::sockopt::sndtimeo, static_cast<int>(timeout_.count()));
    own_.set(zmq::sockopt::router_mandatory, 1);
    if (keys != nullptr) secure_server(own_, *keys);
    // Before bind: no connection comes unwatched; a silent one is dropped (and named) within the timeout.
    watch_ = std::make_unique<ConnectionWatch>(*context_, own_, describe(me), timeout_);
    std::string endpoint = cluster_.listen_endpoint(me);
    try {
      own_.bind(endpoint);
    } catch (const zmq::error_t& e) {
      fail("{}: task {} cannot listen on {} ({}): {}", cluster_.source(), me.str(), cluster_.address(me), endpoint,
           e.what());
    }
  } else {
    own_ = dealer_to({"chief", 0});
  }
  if (me.type != "ps")
    for (int s = 0; s < servers(); ++s) servers_.push_back(dealer_to({"ps", s}));
  std::vector<std::string> hosts, names;
  for (const TaskId& t : tasks_in_rank_order(cluster_)) {
    hosts.push_back(cluster_.host(t));
    names.push_back(cluster_.describe(t));
  }
  auto exchange = [this](std::string& text, const std::function<void()>& meanwhile) {
    if (cluster_.task().type == "chief") greet_as_chief(text, meanwhile);
    else greet_as_other(text);
  };
  int first_worker = 1 + servers();
  auto may_miss_start = [this, first_worker](int rank) { return workers_may_miss_start_ && rank >= first_worker; };
  control_ = std::make_unique<detail::ControlPlane>(control_rank(cluster_, me), hosts, timeout_, nullptr, exchange,
                                                    names, true, may_miss_start);
}

// The task's closing line on strangers and bad requests at its bound socket, when there were any:
// the refusals and drops the log named one by one stop at its rate limit (the tenth, then every
// thousandth); this counts them all.
ClusterLink::~ClusterLink() {
  if (!watch_) return;
  watch_->stop();  // what it names as the job ends is counted too
  std::vector<std::string> parts;
  auto count = [&](int64_t n, const char* one, const char* many) {
    if (n > 0) parts.push_back(fmt::format("{} {}", n, n == 1 ? one : many));
  };
  count(take_messages_dropped(own_), "message dropped", "messages dropped");
  count(requests_refused_, "request refused", "requests refused");
  count(authenticator_ ? authenticator_->refused() : 0, "client refused by key", "clients refused by key");
  count(watch_->refused(), "connection refused", "connections refused");
  if (!parts.empty())
    std::fprintf(stderr, "%s: %s on its ZeroMQ port, in all\n", describe(task()).c_str(),
                 fmt::format("{}", fmt::join(parts, ", ")).c_str());
}

zmq::socket_t ClusterLink::dealer_to(const TaskId& task) {
  zmq::socket_t socket(*context_, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndtimeo, static_cast<int>(timeout_.count()));
  if (keys_) secure_client(socket, *keys_);
  socket.connect(cluster_.endpoint(task));
  return socket;
}

void ClusterLink::reconnect_server(int s) { servers_[static_cast<size_t>(s)] = dealer_to({"ps", s}); }

bool ClusterLink::greet_server_again(int s, const std::function<void()>& meanwhile) {
  reconnect_server(s);
  Outgoing hello(MessageType::Ready, 0);
  hello.add_text(control_text_);
  auto deadline = Clock::now() + timeout_;
  // A fresh connection queues the greeting until the server is there to take it (within the timeout).
  auto& socket = servers_[static_cast<size_t>(s)];
  hello.send(socket);
  while (Clock::now() < deadline) {
    check_failed();
    meanwhile();
    if (auto answer = receive(socket, kSlice, false)) return answer->envelope.type == MessageType::Ready;
  }
  return false;
}

// The chief: its control plane's address to every server (which answers) and to every worker
// (which asked first, saying which worker it is). Meanwhile the control plane takes the
// connections of those that have it: none waits on the chief for another.
void ClusterLink::greet_as_chief(std::string& text, const std::function<void()>& meanwhile) {
  control_text_ = text;
  for (int s = 0; s < servers(); ++s) {
    Outgoing hello(MessageType::Ready, 0);
    hello.add_text(text);
    hello.send(servers_[static_cast<size_t>(s)]);
  }
  // The next message on `socket` by `deadline`, taking joins between slices.
  auto next = [&](zmq::socket_t& socket, Clock::time_point deadline, bool router) -> std::optional<Incoming> {
    for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      if (auto message = receive(socket, std::min(left, kSlice), router)) return message;
      meanwhile();
    }
    return std::nullopt;
  };
  auto deadline = Clock::now() + timeout_;
  for (int s = 0; s < servers(); ++s)
    if (!next(servers_[static_cast<size_t>(s)], deadline, false))
      fail("ParameterServerStrategy: {} did not answer within {} s at start-up", describe({"ps", s}),
           timeout_.count() / 1000.0);
  routes_.assign(static_cast<size_t>(workers()), std::string());
  int greeted = 0;
  deadline = Clock::now() + timeout_;
  while (greeted < workers()) {
    auto message = next(own_, deadline, true);
    if (!message) {
      // Where the job goes on without a worker, it starts without these (the control plane names
      // each as lost); it needs one to start.
      if (workers_may_miss_start_ && greeted > 0) return;
      std::string missing;
      for (int w = 0; w < workers(); ++w)
        if (routes_[static_cast<size_t>(w)].empty()) missing += (missing.empty() ? "" : ", ") + describe({"worker", w});
      fail("ParameterServerStrategy: {} did not reach the chief within {} s at start-up", missing,
           timeout_.count() / 1000.0);
    }
    auto w = static_cast<int64_t>(message->envelope.variable);
    if (message->envelope.type != MessageType::Ready || w >= workers() || !routes_[static_cast<size_t>(w)].empty())
      continue;  // not a worker's greeting: ignored
    routes_[static_cast<size_t>(w)] = message->route;
    Outgoing hello(MessageType::Ready, 0);
    hello.add_text(text);
    hello.send(own_, &routes_[static_cast<size_t>(w)]);
    ++greeted;
  }
}

std::string ClusterLink::describe(const TaskId& task) const {
  if (task.type == "worker" && task.index >= workers()) return fmt::format("worker:{} (joined)", task.index);
  return cluster_.describe(task);
}

void ClusterLink::welcome_worker(int worker, const std::string& route) {
  if (worker >= static_cast<int>(routes_.size())) routes_.resize(static_cast<size_t>(worker) + 1);
  routes_[static_cast<size_t>(worker)] = route;
  Outgoing hello(MessageType::Ready, 0);
  hello.add_text(control_text_);
  hello.send(own_, &route);
}

// A worker says which it is and waits for the chief's answer; a server waits for the chief.
// (The tests' fault hook stops or kills a task as it greets, or once greeted, as it connects.)
void ClusterLink::greet_as_other(std::string& text) {
  const TaskId& me = cluster_.task();
  bool worker = me.type == "worker";
  if (int signal = detail::test_fault_signal(control_rank(cluster_, me), "greeting")) raise(signal);
  if (worker) Outgoing(MessageType::Ready, static_cast<uint32_t>(me.index)).send(own_);
  auto deadline = Clock::now() + timeout_;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto message = left.count() > 0 ? receive(own_, left, !worker) : std::nullopt;
    if (!message)
      fail("ParameterServerStrategy: {} heard nothing from the chief, {}, within {} s at start-up", describe(me),
           describe({"chief", 0}), timeout_.count() / 1000.0);
    if (worker && message->envelope.type == MessageType::Refused)
      fail("ParameterServerStrategy: the chief, {}, refused {}: {}", describe({"chief", 0}), describe(me),
           text_of(*message));
    if (message->envelope.type != MessageType::Ready) continue;
    text = text_of(*message);
    if (!worker) Outgoing(MessageType::Ready, static_cast<uint32_t>(me.index)).send(own_, &message->route);
    if (int signal = detail::test_fault_signal(control_rank(cluster_, me), "connecting")) raise(signal);
    return;
  }
}

void ClusterLink::check_failed() {
  if (control_ && control_->failed()) fail("{}", control_->failure());
}

Incoming ClusterLink::await(zmq::socket_t& socket, bool router, const std::string& from) {
  auto deadline = Clock::now() + timeout_, turn = Clock::now();
  while (true) {
    check_failed();
    // A turn far longer than a slice is time this process did not run (stopped: SIGSTOP, a
    // debugger), not the peer's silence: the deadline moves by it, and the control plane, which
    // saw the stop too, names it (check_failed) rather than this wait blaming the peer.
    if (auto now = Clock::now(); now - turn > timeout_ / 2) deadline += now - turn;
    turn = Clock::now();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      fail("ParameterServerStrategy: {} did not answer within {} s", from, timeout_.count() / 1000.0);
    if (auto message = receive(socket, std::min(left, kSlice), router)) return std::move(*message);
    if (wait_hook_) wait_hook_();  // only once a slice went by: an answer that is there costs nothing more
  }
}

Incoming ClusterLink::await_idle(zmq::socket_t& socket, bool router) {
  while (true) {
    check_failed();
    if (auto message = receive(socket, kSlice, router)) return std::move(*message);
  }
}

}  // namespace tandem::distribute::ps
