// DistributedDataset (tandem/distribute/strategy.h): a dataset's global batches split per replica
// as the strategy splits fit's (StrategyExtended::split_batch), for custom loops.
#include "tandem/distribute/strategy.h"
#include "tandem/error.h"

namespace tandem::distribute {

std::optional<PerReplica<data::Element>> DistributedDataset::Iterator::next() {
  std::optional<data::Element> batch = it_->next();
  if (!batch) return std::nullopt;
  for (const Tensor& t : *batch)
    if (t.rank() < 1)
      fail("distribute_dataset: element component of shape {} has no batch axis to split", t.shape().str());
  int64_t rows = batch->empty() ? 0 : (*batch)[0].dim(0);
  for (const Tensor& t : *batch)
    if (t.dim(0) != rows)
      fail("distribute_dataset: element components have {} and {} rows; every component needs the batch's", rows,
           t.dim(0));
  const StrategyExtended& strategy = strategy_->extended();
  PerReplica<data::Element> out;
  out.first_row = strategy.replica_rows(rows, 0).first;
  for (int r = 0; r < strategy.num_local_replicas(); ++r) {
    auto [begin, end] = strategy.replica_rows(rows, r);
    data::Element part;
    for (const Tensor& t : *batch) part.push_back(t.slice(begin, end));
    out.values.push_back(std::move(part));
  }
  return out;
}

}  // namespace tandem::distribute
