// BatchSplit (tandem/distribute/strategy.h): a global batch cut into parts for the replicas.
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

void BatchSplit::even(int64_t rows, int parts, int replicas) {
  row.resize(static_cast<size_t>(parts) + 1);
  for (int p = 0; p <= parts; ++p) row[static_cast<size_t>(p)] = rows * p / parts;
  first_part.resize(static_cast<size_t>(replicas) + 1);
  for (int r = 0; r <= replicas; ++r) first_part[static_cast<size_t>(r)] = parts * r / replicas;
}

}  // namespace tandem::distribute
