// ZeRO stage 1 (sharded_update.h): the workers' streams of pieces, the rounds they travel in, the
// sharded optimizer.
#include "distribute/data_parallel/sharded_update.h"

#include <algorithm>
#include <cstring>

#include "distribute/gradient_reducer.h"
#include "tandem/collectives/replica_context.h"
#include "tandem/distribute/strategy.h"
#include "tandem/optimizers.h"

namespace tandem::distribute {
namespace {

void copy(float* to, const float* from, int64_t n) {
  if (n > 0) std::memcpy(to, from, static_cast<size_t>(n) * sizeof(float));
}

float* floats(const Tensor& t) { return const_cast<float*>(t.data<float>()); }

}  // namespace

ShardedUpdate::ShardedUpdate(Communicator& workers, bool reduced_by_step, int64_t bucket_bytes)
    : workers_(workers), reduced_by_step_(reduced_by_step), bucket_bytes_(std::max<int64_t>(bucket_bytes, 4096)) {}

ShardedUpdate::~ShardedUpdate() = default;

void ShardedUpdate::lay_out(std::span<Variable* const> variables) {
  int n = workers_.size(), me = workers_.rank();
  variables_.assign(variables.begin(), variables.end());
  streams_.assign(static_cast<size_t>(n), {});
  longest_ = 0;
  for (int w = 0; w < n; ++w) {
    int64_t length = 0;
    for (size_t i = 0; i < variables_.size(); ++i) {
      int64_t size = variables_[i]->value.numel(), begin = size * w / n, end = size * (w + 1) / n;
      if (end > begin) streams_[static_cast<size_t>(w)].push_back({i, begin, end - begin});
      length += end - begin;
    }
    longest_ = std::max(longest_, length);
  }
  round_ = std::max<int64_t>(1, std::min(longest_, bucket_bytes_ / 4 / n));
  send_ = Tensor::zeros({round_ * n});
  receive_ = Tensor::zeros({round_ * n});
  mine_.clear();
  for (const Segment& s : streams_[static_cast<size_t>(me)]) {
    Variable& v = *variables_[s.variable];
    mine_.push_back({.name = v.name,
                     .value = v.value.reshape({v.value.numel()}).slice(s.at, s.at + s.size),
                     .regularizer = v.regularizer});
  }
  mine_pointers_.clear();
  for (Variable& v : mine_) mine_pointers_.push_back(&v);
  shard_.reset();
}

void ShardedUpdate::for_each_in(int w, int64_t from, int64_t to,
                                const std::function<void(const Segment&, int64_t)>& fn) const {
  int64_t start = 0;
  for (const Segment& s : streams_[static_cast<size_t>(w)]) {
    int64_t begin = std::max(from, start), end = std::min(to, start + s.size);
    if (begin < end) fn(Segment{s.variable, s.at + (begin - start), end - begin}, begin - from);
    start += s.size;
    if (start >= to) break;
  }
}

Optimizer& ShardedUpdate::shard_optimizer(Optimizer& optimizer) {
  if (shard_ && shard_of_ == optimizer.id()) return *shard_;
  // The model's optimizer may hold whole slots (restored from a checkpoint): this worker's pieces
  // are cut from them, and the whole ones let go.
  std::vector<std::pair<std::string, Tensor>> whole = optimizer.state(), pieces;
  shard_ = optimizer.replicate({});
  if (whole.size() > 1) {
    pieces.push_back(whole.front());  // the step count
    const std::vector<Segment>& own = streams_[static_cast<size_t>(workers_.rank())];
    for (const Segment& seg : own) {
      std::string prefix = "optimizer/" + variables_[seg.variable]->name + "/";
      for (const auto& [name, tensor] : whole)
        if (name.starts_with(prefix) && name.find('/', prefix.size()) == std::string::npos)
          pieces.emplace_back(name, tensor.reshape({tensor.numel()}).slice(seg.at, seg.at + seg.size).clone());
    }
    shard_->load_state(pieces, mine_pointers_);
    optimizer.forget_slots();
  } else {
    shard_->build(mine_pointers_);
  }
  shard_of_ = optimizer.id();
  return *shard_;
}

void ShardedUpdate::apply(Optimizer& optimizer, std::span<Variable* const> variables,
                          std::span<const Tensor> gradients) {
  if (!reduced_by_step_) return apply_reduced(optimizer, variables, gradients);
  const ReplicaContext* replica = replica_context();
  apply_reduced(optimizer, variables,
                reduce_replica_gradients(*replica, replica->strategy->extended().gradient_reduction(), gradients));
}

void ShardedUpdate::apply_reduced(Optimizer& optimizer, std::span<Variable* const> variables,
                                  std::span<const Tensor> gradients) {
  if (!std::equal(variables.begin(), variables.end(), variables_.begin(), variables_.end())) lay_out(variables);
  if (gradients.size() != variables.size())
    fail("{}: {} gradients for {} variables", optimizer.name(), gradients.size(), variables.size());
  int n = workers_.size(), me = workers_.rank();
  Optimizer& shard = shard_optimizer(optimizer);
  std::vector<Tensor> whole(gradients.size());
  for (size_t i = 0; i < gradients.size(); ++i) whole[i] = gradients[i].contiguous();
  float* send = floats(send_);
  float* receive = floats(receive_);
  if (!reduced_by_step_) {
    // Round by round, every worker's segment of the gradients summed into its own; written back
    // over this worker's pieces of its gradients.
    for (int64_t from = 0; from < longest_; from += round_) {
      std::memset(send, 0, static_cast<size_t>(round_ * n) * sizeof(float));
      for (int w = 0; w < n; ++w)
        for_each_in(w, from, from + round_, [&](const Segment& s, int64_t at) {
          copy(send + w * round_ + at, whole[s.variable].data<float>() + s.at, s.size);
        });
      workers_.reduce_scatter(send, receive, round_, DataType::Float32, ReduceOp::Sum);
      for_each_in(me, from, from + round_,
                  [&](const Segment& s, int64_t at) { copy(floats(whole[s.variable]) + s.at, receive + at, s.size); });
    }
  }
  std::vector<Tensor> mine;  // this worker's pieces of the summed gradients
  for (const Segment& s : streams_[static_cast<size_t>(me)])
    mine.push_back(whole[s.variable].reshape({whole[s.variable].numel()}).slice(s.at, s.at + s.size));
  float lr = optimizer.current_learning_rate();
  if (shard.current_learning_rate() != lr) shard.set_learning_rate(lr);  // a callback changed it
  shard.check_clipping_applies("ZeRO's sharded update (multiworker:N:zero)", false, false);
  shard.apply_here(mine_pointers_, mine);
  optimizer.set_iterations(shard.iterations());
  gather_streams([&](size_t piece) { return mine_[piece].value.data<float>(); },
                 [&](size_t variable) { return floats(variables_[variable]->value); });
}

void ShardedUpdate::gather_streams(const std::function<const float*(size_t piece)>& mine,
                                   const std::function<float*(size_t variable)>& whole) {
  int n = workers_.size(), me = workers_.rank();
  float* send = floats(send_);
  float* receive = floats(receive_);
  const std::vector<Segment>& own = streams_[static_cast<size_t>(me)];
  for (int64_t from = 0; from < longest_; from += round_) {
    int64_t start = 0;
    for (size_t p = 0; p < own.size(); ++p) {  // this worker's segment of the round
      int64_t begin = std::max(from, start), end = std::min(from + round_, start + own[p].size);
      if (begin < end) copy(send + (begin - from), mine(p) + (begin - start), end - begin);
      start += own[p].size;
    }
    workers_.all_gather(send, round_, receive, DataType::Float32);
    for (int w = 0; w < n; ++w)
      for_each_in(w, from, from + round_, [&](const Segment& s, int64_t at) {
        copy(whole(s.variable) + s.at, receive + w * round_ + at, s.size);
      });
  }
}

void ShardedUpdate::complete_state(std::vector<std::pair<std::string, Tensor>>& state) {
  if (!shard_) return;  // no step yet: the model's optimizer holds what there is
  std::vector<std::pair<std::string, Tensor>> mine = shard_->state();
  // The slots' names, as the optimizer writes them for a piece ("m", "v").
  std::vector<std::string> slots;
  if (mine.size() > 1) {
    std::string owner = "optimizer/" + mine_.front().name + "/";
    for (size_t e = 1; e < mine.size() && mine[e].first.starts_with(owner); ++e)
      slots.push_back(mine[e].first.substr(owner.size()));
  }
  auto count = static_cast<int64_t>(slots.size()), most = count;
  workers_.all_reduce(&most, 1, DataType::Int64, ReduceOp::Max);
  if (most != count)
    fail("ShardedUpdate: the workers' optimizers keep different slots ({} here, {} elsewhere)", count, most);
  std::erase_if(state, [&](const auto& entry) {
    return std::any_of(variables_.begin(), variables_.end(),
                       [&](const Variable* v) { return entry.first.starts_with("optimizer/" + v->name + "/"); });
  });
  std::vector<std::vector<Tensor>> gathered(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    std::vector<const float*> pieces;
    for (const Variable& piece : mine_) {
      std::string name = "optimizer/" + piece.name + "/" + slots[k];
      auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& e) { return e.first == name; });
      if (it == mine.end()) fail("ShardedUpdate: no slot \"{}\" here", name);
      pieces.push_back(it->second.data<float>());
    }
    for (Variable* v : variables_) gathered[k].push_back(Tensor::empty(v->value.shape()));
    gather_streams([&](size_t piece) { return pieces[piece]; },
                   [&](size_t variable) { return floats(gathered[k][variable]); });
  }
  for (size_t i = 0; i < variables_.size(); ++i)  // in the optimizer's order: per variable, its slots
    for (size_t k = 0; k < slots.size(); ++k)
      state.emplace_back("optimizer/" + variables_[i]->name + "/" + slots[k], gathered[k][i]);
}

int64_t ShardedUpdate::slot_bytes() const {
  if (!shard_) return 0;
  int64_t bytes = 0;
  for (const auto& [name, tensor] : shard_->state())
    if (name != "optimizer/iterations") bytes += tensor.numel() * 4;
  return bytes;
}

}  // namespace tandem::distribute
