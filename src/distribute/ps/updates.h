#pragma once
// How a parameter server applies the workers' pushes: one policy per mode, made by the chief's
// init. The server (server.h) keeps the shards, the transport, the journal and the replay; the
// policy decides when a push updates the shards and with which optimizer state.
// - Asynchronous: each push applied as it arrives, through the pushing worker's own copy of the
//   optimizer's state (as in between-graph replication, where every worker builds its own
//   optimizer: a worker's momentum sums its own gradients, not the others' stale ones; checkpoints
//   keep worker 0's). Each worker's clock is kept (its steps applied here); with a staleness bound
//   S, a push more than S steps ahead of the slowest worker is refused.
// - Synchronous: a round's pushes (each a gradient already scaled by the round's rows) summed in
//   worker order and applied once; a push computed on a version the round has left behind (backup
//   workers: the round was applied without it) is dropped, and so is a push for a round already
//   applied or closed (its worker was dropped from the rounds, as one stopped for a while is, and
//   went on: its gradients would start a round no other worker is in).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "distribute/ps/wire.h"
#include "tandem/optimizers.h"

namespace tandem::distribute::ps {

// A worker's push, checked by the server (its gradients in shard order, computed on a version
// not past the server's).
struct Push {
  uint32_t worker = 0;
  PushInfo info;            // the worker's clock; a synchronous round's number and pushes
  int64_t computed_on = 0;  // the version the gradients were computed on
  int64_t version = 0;      // the server's, as the push came
  std::vector<Tensor> gradients;
};

class UpdatePolicy {
 public:
  // One update of the server's shards by `optimizer` with `gradients`: the version goes up by one.
  using Apply = std::function<void(Optimizer& optimizer, std::vector<Tensor>& gradients)>;
  virtual ~UpdatePolicy() = default;
  // The push applied (now or with its round); returns what the answer says: the staleness it was
  // applied with, or -1: dropped. An Error for a push the mode refuses.
  virtual int64_t push(Push push) = 0;
  // Round `round` closed (a worker of it died): applied with the pushes it has, if it is in
  // progress; a later push for it or an earlier one dropped. Returns the pushes it was applied with
  // (-1: this server holds no shard, so has no count).
  virtual int64_t close_round(int64_t round) {
    (void)round;
    return 0;
  }
  // The optimizer state a checkpoint keeps, and the iterations it reports.
  virtual Optimizer& saved() = 0;
  virtual int64_t iterations() { return saved().iterations(); }
  // Whether each pull and push is journalled for --record (and replayed in order for --replay).
  virtual bool journals() const { return false; }
  // Pushes dropped (synchronous), and the pushes applied by how many steps their worker was ahead of
  // the slowest (asynchronous).
  virtual int64_t dropped() const { return 0; }
  virtual const std::map<int64_t, int64_t>& ahead_counts() const;
  // The log's line at the end (empty: none).
  virtual std::string describe(const std::string& server) const {
    (void)server;
    return {};
  }
};

// For the init's policy (wire.h's PsPolicy): the updates over `variables` (the server's shards) from `optimizer` (built and loaded with their
// state); `clocks`: the workers' clocks so far (a restore; empty: zeros).
std::unique_ptr<UpdatePolicy> make_update_policy(const PsPolicy& policy, Optimizer& optimizer,
                                                 std::span<Variable* const> variables, int workers,
                                                 std::vector<int64_t> clocks, UpdatePolicy::Apply apply);

}  // namespace tandem::distribute::ps
