// The Strategy base (tandem/distribute/strategy.h): its default hooks, scopes, and the host-side
// reduce and gather of per-replica values.
#include "tandem/distribute/strategy.h"

#include <algorithm>
#include <cstring>

#include "distribute/replica_threads.h"
#include "distribute/update_rules.h"
#include "tandem/error.h"

namespace tandem::distribute {
namespace {
// The scopes open on this thread, innermost last: C++'s Scope objects and the Python module's
// `with strategy.scope()` alike.
thread_local std::vector<Strategy*> open_scopes;
}  // namespace

std::shared_ptr<layers::Layer> StrategyExtended::replica_layer(const layers::Layer& layer, int) const {
  return layer.replicate();
}

std::vector<std::shared_ptr<layers::Layer>> StrategyExtended::replica_layers(
    const std::vector<std::shared_ptr<layers::Layer>>& layers, int replica) const {
  std::vector<std::shared_ptr<layers::Layer>> out = layers;
  if (replica > 0) {
    out.clear();
    for (const auto& l : layers) out.push_back(replica_layer(*l, replica));
  }
  std::vector<Device> devices = replica_devices();
  if (!devices.empty())
    for (const auto& l : out)
      if (l->device() != devices.at(static_cast<size_t>(replica))) l->place_on(devices[static_cast<size_t>(replica)]);
  return out;
}

UpdateRule& StrategyExtended::update_rule() const { return mirrored_update_rule(); }

ReplicaThreads& StrategyExtended::executors() const {
  if (executors_ == nullptr) fail("{}: runs no replicas of its own (no executors)", name());
  return *executors_;
}
void StrategyExtended::for_each_replica(const std::function<void(int replica)>& fn) { executors().run(fn); }
Communicator& StrategyExtended::communicator(int replica) { return executors().communicator(replica); }
int StrategyExtended::threads_per_replica() const {
  return executors_ != nullptr ? executors_->threads_per_replica() : 0;
}
std::vector<int64_t> StrategyExtended::replica_runs() const {
  return executors_ != nullptr ? executors_->runs() : std::vector<int64_t>{};
}

void StrategyExtended::split_batch(int64_t rows, BatchSplit& split) const {
  split.even(rows, num_replicas_in_sync(), num_replicas_in_sync());
}

std::pair<int64_t, int64_t> StrategyExtended::replica_rows(int64_t rows, int replica) const {
  BatchSplit split;
  split_batch(rows, split);
  auto g = static_cast<size_t>(first_local_replica() + replica);
  return {split.begin(split.first_part.at(g)), split.begin(split.first_part.at(g + 1))};
}

void enter_scope(Strategy* s) { open_scopes.push_back(s); }
void exit_scope(Strategy* s) {
  if (open_scopes.empty() || open_scopes.back() != s)
    fail(
        "the scope of {} is not the innermost open on this thread ({}): scopes close in the order opposite to "
        "their opening, on the thread that opened them",
        s != nullptr ? s->name() : "no strategy",
        open_scopes.empty() ? "none is open"
                            : "the innermost is " + (open_scopes.back() != nullptr ? open_scopes.back()->name()
                                                                                   : std::string("no strategy's")));
  open_scopes.pop_back();
}
Strategy::Scope::Scope(Strategy* s) : depth_(open_scopes.size()) { enter_scope(s); }
// The stack as it was when this scope opened: what opened after it and did not close (an
// exception between a binding's enter and exit) closes with it.
Strategy::Scope::~Scope() { open_scopes.resize(std::min(open_scopes.size(), depth_)); }
Strategy* current_strategy() { return open_scopes.empty() ? nullptr : open_scopes.back(); }

Strategy::Strategy(std::unique_ptr<StrategyExtended> extended) : extended_(std::move(extended)) {
  if (extended_ == nullptr) fail("Strategy: made from no StrategyExtended (null)");
  extended_->strategy_ = this;
}
Strategy::~Strategy() = default;
Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& values) {
  check_per_replica(values.size(), "reduce");
  const Shape& shape = values[0].shape();
  Tensor out = Tensor::empty(shape);
  float* o = out.data<float>();
  for (int r = 0; r < values.size(); ++r) {
    if (!(values[r].shape() == shape) || values[r].dtype() != DType::Float32)
      fail("reduce: replica {} has a {} tensor of shape {}, replica 0 float32 of shape {}", r,
           dtype_name(values[r].dtype()), values[r].shape().str(), shape.str());
    Tensor c = values[r].to(Device::cpu()).contiguous();  // reduced on the host
    const float* v = c.data<float>();
    for (int64_t i = 0, n = c.numel(); i < n; ++i)
      o[i] = r == 0                ? v[i]
             : op == ReduceOp::Min ? std::min(o[i], v[i])
             : op == ReduceOp::Max ? std::max(o[i], v[i])
                                   : o[i] + v[i];
  }
  // Over several processes, every worker's replicas (each worker passes the same shape).
  Communicator* workers = extended_->worker_communicator();
  if (workers != nullptr && workers->size() > 1)
    workers->all_reduce(o, out.numel(), DataType::Float32, op == ReduceOp::Mean ? ReduceOp::Sum : op);
  if (op == ReduceOp::Mean)
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] /= static_cast<float>(num_replicas_in_sync());
  return out;
}

Tensor Strategy::gather(const PerReplica<Tensor>& values, int axis) {
  check_per_replica(values.size(), "gather");
  const Tensor& first = values[0];
  int rank = first.rank();
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) fail("gather: axis {} out of range for rank {}", axis, rank);
  Shape shape = first.shape();
  shape[axis] = 0;
  for (int r = 0; r < values.size(); ++r) {
    const Tensor& t = values[r];
    bool same = t.rank() == rank && t.dtype() == first.dtype();
    for (int d = 0; same && d < rank; ++d) same = d == axis || t.dim(d) == first.dim(d);
    if (!same)
      fail("gather: replica {} has a {} tensor of shape {}, which does not stack with replica 0's {} along axis {}", r,
           dtype_name(t.dtype()), t.shape().str(), first.shape().str(), axis);
    shape[axis] += t.dim(axis);
  }
  Tensor out = Tensor::empty(shape, first.dtype());
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(first.dtype()));
  for (int d = 0; d < axis; ++d) outer *= first.dim(d);
  for (int d = axis + 1; d < rank; ++d) inner *= first.dim(d);
  auto* dst = static_cast<char*>(out.raw());
  int64_t row = shape[axis] * inner, offset = 0;
  for (int r = 0; r < values.size(); ++r) {
    Tensor c = values[r].to(Device::cpu()).contiguous();
    int64_t block = c.dim(axis) * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * row + offset, static_cast<const char*>(c.raw()) + o * block, static_cast<size_t>(block));
    offset += block;
  }
  return out;
}

}  // namespace tandem::distribute
