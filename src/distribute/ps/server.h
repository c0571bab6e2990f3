#pragma once
// A parameter server: the shards of the variables placed on it and, beside them, the optimizer
// with its slots, which applies the workers' pushes as the mode's update policy says (updates.h:
// asynchronous, each push at once through its worker's own optimizer state; synchronous, a
// round's pushes summed and applied once). One thread serves every request in arrival order; a
// message that does not decode, or names a shard or shape the server does not hold, is refused
// (answered with the reason, counted and logged), and serving goes on.
// Asynchronous, it may keep a journal of the pulls it answered and the pushes it applied (for
// --record), or be given such an order to follow (--replay): requests that come early are held
// until their turn, so that every answer and update is that of the recorded run.
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "distribute/ps/record.h"
#include "distribute/ps/transport.h"
#include "distribute/ps/updates.h"
#include "tandem/optimizers.h"

namespace tandem::distribute::ps {

class ParameterServer {
 public:
  // `name`: the task, for the log ("ps:0 (127.0.0.1:2223)"); `optimizer`: a fresh copy of the model's.
  // `workers`: how many push (their clocks are kept, asynchronous).
  ParameterServer(std::string name, std::unique_ptr<Optimizer> optimizer, int workers = 1);
  // Serves on `socket` (a ROUTER bound to the task's address) until a Stop comes or `stop()` says
  // so (asked between messages, at least every `poll`).
  void serve(zmq::socket_t& socket, const std::function<bool()>& stop,
             std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  // One request's answer; false when the request was Stop (answered).
  bool handle(const Incoming& request, Outgoing& answer);
  // Called with the task's phase as it answers the chief's read of its state ("serving a read",
  // then the phase before): the job names it if the server dies meanwhile.
  std::function<std::string(const std::string& phase)> set_phase;
  int64_t version() const { return version_; }
  int64_t refused() const { return refused_; }
  int64_t dropped() const { return updates_ ? updates_->dropped() : 0; }  // synchronous: pushes after their round
  // Asynchronous: the pushes applied, by how many steps their worker was ahead of the slowest
  // worker (by the clocks of the pushes applied here).
  const std::map<int64_t, int64_t>& ahead_counts() const;

 private:
  struct Shard {
    uint32_t variable, shard;
    Variable value;
  };
  void init(const Incoming& request);
  // The requests held for a replay that are next in its order, answered in that order.
  void answer_in_recorded_order(zmq::socket_t& socket);
  void answer(zmq::socket_t& socket, const Incoming& request);  // handle(), its answer sent
  PsRecord::Event event_of(const Incoming& request) const;      // a worker's pull or push, as journalled
  void hand_journal(Outgoing& answer);  // the journal since the chief last asked, into answer (then cleared)
  void push(const Incoming& request, Outgoing& answer);
  void apply(Optimizer& optimizer, std::vector<Tensor>& gradients);  // one update: the version + 1
  // The push's gradients in shard order, checked (every shard once, float32, the shard's shape).
  std::vector<Tensor> gradients_of(const Incoming& request) const;
  void state(Outgoing& answer);
  void log_refusal(const std::string& what);
  std::string name_;
  std::unique_ptr<Optimizer> optimizer_;   // as initialized
  std::unique_ptr<UpdatePolicy> updates_;  // the init's mode's
  int workers_;
  std::vector<Shard> shards_;
  std::vector<Variable*> variables_;
  std::map<std::pair<uint32_t, uint32_t>, size_t> index_;
  bool initialized_ = false;         // an init has come
  int64_t version_ = 0;              // updates applied
  std::atomic<int64_t> refused_{0};  // read by other threads (refused())
  bool journaling_ = false;
  std::vector<PsRecord::Event> journal_;  // since the chief last asked
  std::vector<PsRecord::Event> replay_;   // the order to follow (empty: none)
  size_t replay_at_ = 0;
  std::map<uint32_t, std::deque<Incoming>> held_;             // a replay's early requests, by worker
  std::map<uint32_t, std::deque<PsRecord::Event>> expected_;  // a replay: each worker's events to come
  // A replay's request, checked as it arrives against its worker's next recorded event; an Error
  // naming both when the run is no longer the recorded one.
  void check_replayed(const Incoming& request);
  bool going_on_ = true;  // no Stop yet
};

}  // namespace tandem::distribute::ps
