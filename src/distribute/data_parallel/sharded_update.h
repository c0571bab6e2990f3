#pragma once
// ZeRO stage 1 (MultiWorkerOptions::zero): each of the N workers keeps the optimizer's slots for
// its 1/N of every trainable variable (worker w: elements [n·w/N, n·(w+1)/N) of a variable of n)
// and updates only that piece. A worker's pieces, variable after variable, are its stream; the
// streams travel in rounds of bucket_bytes (N segments of the same length, one per worker):
// reduce-scattered, so that each worker receives the sum of its own pieces' gradients (written
// back over its gradients there), and after the update all-gathered into every worker's
// variables. The memory beyond the plain strategy's gradients: its slots' 1/N and two buffers of
// bucket_bytes. With deterministic mode the step's reducer has already summed every gradient in
// part order (the same bits as multiworker:N:deterministic), and only the update and the
// all-gather are sharded.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/collectives/communicator.h"
#include "tandem/distribute/update_rule.h"

namespace tandem::distribute {

class ShardedUpdate : public UpdateRule {
 public:
  // `workers`: one replica per worker (their group); `reduced_by_step`: the gradients come summed.
  ShardedUpdate(Communicator& workers, bool reduced_by_step, int64_t bucket_bytes);
  ~ShardedUpdate() override;
  // A custom loop's Optimizer::apply: as the step's.
  void apply(Optimizer& optimizer, std::span<Variable* const> variables, std::span<const Tensor> gradients) override;
  void apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                     std::span<const Tensor> gradients) override;
  // Collective over the workers: the entries of `state` for the optimizer's slots made whole from
  // every worker's pieces (added where missing), in the order the optimizer writes them.
  void complete_state(std::vector<std::pair<std::string, Tensor>>& state);
  // The bytes of optimizer slots this worker holds.
  int64_t slot_bytes() const;

 private:
  // Where part of a worker's stream lies: variable `variable`, elements [at, at + size).
  struct Segment {
    size_t variable;
    int64_t at, size;
  };
  void lay_out(std::span<Variable* const> variables);
  Optimizer& shard_optimizer(Optimizer& optimizer);
  // fn(segment, first) for each piece of worker w's stream within [from, to): its place in a
  // variable, and where it starts in the round (from `from`).
  void for_each_in(int w, int64_t from, int64_t to, const std::function<void(const Segment&, int64_t)>& fn) const;
  // Rounds of the all-gather: every worker's stream of `mine(segment)` (this worker's pieces,
  // each a buffer of its segment's size) into `whole(variable)` (whole variables' buffers).
  void gather_streams(const std::function<const float*(size_t piece)>& mine,
                      const std::function<float*(size_t variable)>& whole);
  Communicator& workers_;
  bool reduced_by_step_;
  int64_t bucket_bytes_;
  std::vector<Variable*> variables_;           // as laid out
  std::vector<std::vector<Segment>> streams_;  // per worker: its pieces, in order
  int64_t round_ = 0, longest_ = 0;            // a round's length per worker; the longest stream
  std::vector<Variable> mine_;                 // this worker's pieces, views of the variables
  std::vector<Variable*> mine_pointers_;
  std::unique_ptr<Optimizer> shard_;
  uint64_t shard_of_ = 0;  // the id of the optimizer the shard was cut from
  Tensor send_, receive_;  // a round each
};

}  // namespace tandem::distribute
