// The ordered (deterministic) step for models with layers that need a replica's parts together
// (BatchNormalization: statistics over the global batch): every layer runs on all the replica's
// parts before the next, on one tape. Each part uses its own aliases of the variables (views with
// their own tape identity), so that its gradients stay apart, to be summed in part order.
#include <optional>

#include "distribute/replica_state.h"
#include "distribute/step_body.h"
#include "tandem/distribute/train_step.h"
#include "tandem/ops.h"

namespace tandem::distribute {
namespace {
// The variables' own tensors back when the step ends, whatever happens.
struct RestoreValues {
  std::vector<Variable*>& vars;
  std::vector<Tensor> originals;
  ~RestoreValues() {
    for (size_t j = 0; j < vars.size(); ++j) vars[j]->value = originals[j];
  }
};
}  // namespace

std::vector<double> TrainStep::gather_part_values(int r, std::span<const double> values, size_t per_part,
                                                  const std::vector<int>& live) {
  const std::vector<int>& first = split_.first_part;
  int replicas = strategy_->num_replicas_in_sync(), most = 1;
  for (int q = 0; q < replicas; ++q)
    most = std::max(most, first[static_cast<size_t>(q) + 1] - first[static_cast<size_t>(q)]);
  if (!values.empty() && values.size() != live.size() * per_part)
    fail("deterministic step: a layer gathered {} values for {} parts of {}", values.size(), live.size(), per_part);
  std::vector<double> send(static_cast<size_t>(most) * per_part, 0.0);
  int mine = first[static_cast<size_t>(global_replica(r))];
  for (size_t i = 0; i < live.size() && !values.empty(); ++i)
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(i * per_part), per_part,
                send.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(live[i] - mine) * per_part));
  std::vector<double> received(send.size() * static_cast<size_t>(replicas));
  strategy_->communicator(r).all_gather(send.data(), static_cast<int64_t>(send.size()), received.data(),
                                        DataType::Float64);
  std::vector<double> all(static_cast<size_t>(split_.parts()) * per_part);
  for (int q = 0; q < replicas; ++q)
    for (int p = first[static_cast<size_t>(q)]; p < first[static_cast<size_t>(q) + 1]; ++p)
      std::copy_n(
          received.begin() + static_cast<std::ptrdiff_t>(
                                 (static_cast<size_t>(q * most + p - first[static_cast<size_t>(q)])) * per_part),
          per_part, all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(p) * per_part));
  return all;
}

void TrainStep::compute_parts_together(ReplicaState& work, int r) {
  ModelReplicas::Replica& rep = replicas_[r];
  int g = global_replica(r);
  int first = split_.first_part[static_cast<size_t>(g)], last = split_.first_part[static_cast<size_t>(g) + 1];
  std::vector<int> live;  // this replica's parts with rows; even with none it runs, for the collectives
  std::vector<Tensor> h, y;
  std::vector<CallContext> contexts;
  std::vector<std::vector<Tensor>> penalties(static_cast<size_t>(last - first));  // each part's activity penalties
  for (int p = first; p < last; ++p) {
    if (split_.begin(p) == split_.end(p)) continue;
    live.push_back(p);
    batch_->slice(split_.begin(p), split_.end(p), h.emplace_back(), y.emplace_back());
    contexts.push_back(BatchRows{seed_, key_, split_.begin(p), batch_->rows}.context());
    contexts.back().penalties = &penalties[live.size() - 1];
  }
  size_t k = rep.trainable.size(), count = live.size();
  std::optional<ops::RowExactProducts> exact;
  if (exact_products_) exact.emplace();
  RestoreValues restore{rep.trainable, {}};
  for (Variable* v : rep.trainable) restore.originals.push_back(v->value);
  std::vector<Tensor> aliases(count * k), grads(count * k);
  work.tape.reset();
  for (size_t a = 0; a < aliases.size(); ++a) {
    const Tensor& v = restore.originals[a % k];
    aliases[a] = v.reshape(v.shape());
    work.tape.watch(aliases[a]);
  }
  layers::BatchParts step{
      h, contexts,
      [&](size_t i) {
        for (size_t j = 0; j < k; ++j) rep.trainable[j]->value = aliases[i * k + j];
      },
      [&](std::span<const double> values, size_t per_part) { return gather_part_values(r, values, per_part, live); }};
  layers::call_network_parts(rep.network(), step);
  std::vector<Tensor> per_sample(count);
  Tensor loss;
  for (size_t i = 0; i < count; ++i) {
    RowsLoss part = rows_loss(loss_, y[i], h[i],
                              {seed_, key_, split_.begin(live[i]), batch_->rows, nullptr, nullptr,
                               batch_->weights_of(split_.begin(live[i]), split_.end(live[i]))},
                              penalties[i]);
    per_sample[i] = part.per_sample;
    loss = i == 0 ? part.loss : ops::add(loss, part.loss);
  }
  if (count > 0) backward(work.tape, loss, {aliases, grads});
  for (auto it = rep.layers.rbegin(); it != rep.layers.rend(); ++it) (*it)->finish_parts();
  for (size_t i = 0; i < count; ++i) {
    auto p = static_cast<size_t>(live[i]);
    part_losses_[p] = ops::sum(per_sample[i]).item();
    result_.predictions[p] = h[i];
    result_.labels[p] = y[i];
    work.reducer.add(live[i] - first, std::span<Tensor>(grads).subspan(i * k, k));
  }
}

}  // namespace tandem::distribute
