// The ordered (deterministic) step for models whose layers compute each row alone (Dense, Dropout,
// Flatten, Activation): the replica's parts run forward and backward as one batch, with Dense's
// products row-exact (ops::RowExactProducts), so that every row's activations and gradients have
// the bits they would have in its part alone. What sums over rows is still taken part by part, in
// part order: each part's loss, and its Dense kernel and bias gradients, from its rows of the
// inputs and pre-activation gradients dense's backward keeps (ops::DeferredKernelGradients). So the
// bits are those of the parts one by one for any replica or worker count, at the cost of one pass
// of the model instead of one per part.
#include <algorithm>

#include "distribute/replica_state.h"
#include "distribute/step_body.h"
#include "tandem/distribute/train_step.h"
#include "tandem/ops.h"
#include "tandem/timeline.h"

namespace tandem::distribute {

void TrainStep::compute_parts_stacked(ReplicaState& work, int r) {
  int g = global_replica(r);
  int first = split_.first_part[static_cast<size_t>(g)], last = split_.first_part[static_cast<size_t>(g) + 1];
  int64_t begin = split_.row[static_cast<size_t>(first)], end = split_.row[static_cast<size_t>(last)];
  Tensor h, y;
  batch_->slice(begin, end, h, y);
  Timeline* timeline = strategy_->timeline();
  ops::RowExactProducts exact;
  ops::DeferredKernelGradients deferred;
  for (size_t i = 0; i < work.sources.size(); ++i)
    if (work.as_products[i]) {
      bool with_bias = std::find(work.bias_of.begin(), work.bias_of.end(), static_cast<int>(i)) != work.bias_of.end();
      deferred.defer(work.sources[i], with_bias);
    }
  for (Tensor& grad : work.grads) grad = Tensor();  // the last step's go before backward
  // Dropout's masks are drawn per row, and each row's gradient starts at 1 ÷ the global batch: as
  // in the parts' own steps.
  RowsForward step = train_rows(work.tape, replicas_[r].network(), loss_, h, y,
                                {seed_, key_, begin, batch_->rows, &deferred, nullptr, batch_->weights_of(begin, end)},
                                {work.tape_sources, work.tape_grads}, {timeline, work.thread_name.c_str()});
  h = step.predictions;
  const Tensor& per_sample = step.loss.per_sample;
  std::vector<ops::KernelProducts> kept(work.sources.size());
  for (size_t i = 0; i < work.sources.size(); ++i)
    if (work.as_products[i]) kept[i] = deferred.take(work.sources[i]);
  for (int p = first; p < last; ++p) {
    int64_t from = split_.row[static_cast<size_t>(p)] - begin, to = split_.row[static_cast<size_t>(p) + 1] - begin;
    for (size_t i = 0; i < work.sources.size(); ++i) {
      if (work.as_products[i]) work.products[i] = kept[i].rows(from, to);
      else
        work.grads[i] = kept[static_cast<size_t>(work.bias_of[i])].rows(from, to).bias_gradient(
            work.sources[i].dim(0), work.sources[i].device());
    }
    part_losses_[static_cast<size_t>(p)] = ops::sum(per_sample.slice(from, to)).item();
    result_.predictions[static_cast<size_t>(p)] = h.slice(from, to);
    result_.labels[static_cast<size_t>(p)] = y.slice(from, to);
    work.reducer.add(p - first, work.grads, work.products);
  }
}

}  // namespace tandem::distribute
