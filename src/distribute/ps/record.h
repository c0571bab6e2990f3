#pragma once
// The record of an asynchronous parameter-server run (--record FILE), and what a replay of it
// forces (--replay FILE): which worker took each step the chief handed out, and, for each server,
// the order in which it answered the workers' pulls and applied their pushes. A JSON file:
//   {"tandem_ps_record": 1, "workers": W, "servers": P, "complete": true, "prefetch": false,
//    "initial_weights": "<FNV-1a of the trainable variables' bytes when training began, hex>",
//    "steps": [[worker, epoch, step in the epoch], ...],
//    "servers_applied": [[[kind, worker, clock, version], ...], ...]}
// kind 0 is a pull (version: the one answered), 1 a push (version: the one it was computed on;
// clock: the worker's steps before it). A run in which a worker or server died is recorded as
// not complete: its order cannot be forced again.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::distribute::ps {

struct PsRecord {
  using Event = std::array<int32_t, 4>;  // kind, worker, clock, version
  static constexpr int32_t kPull = 0, kPush = 1;
  int workers = 0, servers = 0;
  bool complete = true;
  bool prefetch = false;                      // the workers' pulls went out early: a replay must do the same
  std::string initial_weights;                // a hash: a replay must start from the same weights
  std::vector<std::array<int32_t, 3>> steps;  // worker, epoch, step in the epoch
  std::vector<std::vector<Event>> applied;    // per server
};

// A count kept in one of the record's 32-bit fields; an Error naming `what` where it does not fit
// (a run too long to record), never a narrowed value.
int32_t record_field(int64_t value, const char* what);

void write_record(const std::string& path, const PsRecord& record);  // atomically
// A missing or malformed file is an Error naming what was expected.
PsRecord read_record(const std::string& path);

}  // namespace tandem::distribute::ps
