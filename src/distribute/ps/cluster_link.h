#pragma once
// What every task of a parameter-server cluster holds: its ZeroMQ sockets and the control plane
// (collectives/control_plane.h) that watches the other tasks. The chief is control rank 0, server
// j rank 1 + j, worker i rank 1 + P + i (workers last: one added to a running job takes a rank
// past them). Made when the strategy is (every task at once, as MPI's
// start): the chief binds its address and greets every server and worker over ZeroMQ, which
// carries the control plane's address; a task that does not answer within the timeout is named.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "collectives/control_plane.h"
#include "distribute/ps/transport.h"
#include "tandem/distribute/cluster.h"

namespace tandem::distribute::ps {

struct Keys;
class Authenticator;
class ConnectionWatch;

class ClusterLink {
 public:
  // `keys`: CurveZMQ on every socket (auth.h), or null. `context`: the ZeroMQ context shared by the
  // tasks of an in-process cluster (inproc endpoints need one); null: this task's own.
  // `workers_may_miss_start` (the chief, where the job goes on without a worker): the job starts
  // with the workers that came within the timeout (at least one); each other is lost at once (the
  // control plane's event names it) and may join later.
  ClusterLink(const ClusterSpec& cluster, std::chrono::milliseconds timeout, const Keys* keys = nullptr,
              std::shared_ptr<zmq::context_t> context = nullptr, bool workers_may_miss_start = false);
  ~ClusterLink();

  const ClusterSpec& cluster() const { return cluster_; }
  const TaskId& task() const { return cluster_.task(); }
  int workers() const { return cluster_.count("worker"); }
  int servers() const { return cluster_.count("ps"); }
  std::string describe(const TaskId& task) const;  // "worker:3 (127.0.0.1:2224)"; one joined later: "worker:3 (joined)"
  std::chrono::milliseconds timeout() const { return timeout_; }
  detail::ControlPlane& control() { return *control_; }

  // The chief and the workers: a DEALER to each server. The chief: the ROUTER the workers talk to,
  // and each worker's route.
  std::vector<zmq::socket_t>& server_sockets() { return servers_; }
  zmq::socket_t& own_socket() { return own_; }  // chief, ps: the bound ROUTER; worker: a DEALER to the chief
  const std::string& worker_route(int worker) const { return routes_[static_cast<size_t>(worker)]; }
  int routed_workers() const { return static_cast<int>(routes_.size()); }  // the chief: those added included
  // The chief: a worker that greets it during training (started again, or added: an index beyond
  // the spec's) at `route` is answered as at start-up, with the control plane's address; it then
  // joins the control plane as its rank.
  void welcome_worker(int worker, const std::string& route);
  // The chief and the workers: a new connection to server s (a server started again), whatever
  // the old one still queued dropped.
  void reconnect_server(int s);
  // The chief: greets server s (started again) as at start-up and waits, at most the timeout, for
  // its answer, calling `meanwhile` between slices; false when it did not answer.
  bool greet_server_again(int s, const std::function<void()>& meanwhile);
  // Called after each slice of an await that brought nothing (a worker watches its chief for a
  // step called back).
  void set_wait_hook(std::function<void()> hook) { wait_hook_ = std::move(hook); }
  zmq::context_t& context() { return *context_; }

  // The next message on `socket` within the timeout, checking the control plane between slices:
  // an Error naming `from` when nothing came, naming the failed task when the job failed.
  Incoming await(zmq::socket_t& socket, bool router, const std::string& from);
  // Like await, with no deadline of its own (the control plane ends it if a task fails): for a
  // task idle until the chief hands it something.
  Incoming await_idle(zmq::socket_t& socket, bool router);
  void check_failed();  // an Error when the control plane says the job failed
  // A server: the requests it refused (ParameterServer::refused), for the task's closing line.
  void set_requests_refused(int64_t n) { requests_refused_ = n; }

 private:
  void greet_as_chief(std::string& text, const std::function<void()>& meanwhile);
  zmq::socket_t dealer_to(const TaskId& task);
  void greet_as_other(std::string& text);
  ClusterSpec cluster_;
  std::chrono::milliseconds timeout_;
  bool workers_may_miss_start_;
  std::shared_ptr<zmq::context_t> context_;
  std::unique_ptr<Authenticator> authenticator_;  // the bound socket's allowlist (with keys)
  zmq::socket_t own_;
  std::unique_ptr<ConnectionWatch> watch_;  // own_'s connections (chief, ps); destroyed before it
  int64_t requests_refused_ = 0;
  std::vector<zmq::socket_t> servers_;
  std::vector<std::string> routes_;
  std::string control_text_;  // the chief: the control plane's address, as greetings carry it
  std::unique_ptr<Keys> keys_;
  std::function<void()> wait_hook_;
  std::unique_ptr<detail::ControlPlane> control_;
};

// The control rank of a task, and every task's name and host in rank order.
int control_rank(const ClusterSpec& cluster, const TaskId& task);
std::vector<TaskId> tasks_in_rank_order(const ClusterSpec& cluster);

}  // namespace tandem::distribute::ps
