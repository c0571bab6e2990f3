// Variables cut into shards and placed on the servers (place_variables, parameter_server.h).
#include <algorithm>
#include <limits>

#include "tandem/distribute/parameter_server.h"
#include "tandem/error.h"

namespace tandem::distribute {

std::vector<ShardPlacement> place_variables(const std::vector<Shape>& shapes, int servers,
                                            const Partitioner& partitioner) {
  if (servers < 1) fail("place_variables: {} parameter servers (at least one)", servers);
  if (partitioner.kind == Partitioner::Kind::MinSize && (partitioner.min_shard_bytes < 1 || partitioner.max_shards < 1))
    fail("MinSizePartitioner: min_shard_bytes {} and max_shards {} must be positive", partitioner.min_shard_bytes,
         partitioner.max_shards);
  if (partitioner.kind == Partitioner::Kind::FixedShards && partitioner.num_shards < 1)
    fail("FixedShardsPartitioner: num_shards must be positive, got {}", partitioner.num_shards);
  if (partitioner.kind == Partitioner::Kind::MaxSize && (partitioner.max_shard_bytes < 1 || partitioner.max_shards < 0))
    fail("MaxSizePartitioner: max_shard_bytes {} must be positive and max_shards {} positive (or 0: no limit)",
         partitioner.max_shard_bytes, partitioner.max_shards);
  std::vector<ShardPlacement> shards;
  std::vector<int64_t> bytes;
  for (size_t v = 0; v < shapes.size(); ++v) {
    const Shape& s = shapes[v];
    int64_t rows = s.rank() > 0 ? s[0] : 1, size = s.numel() * static_cast<int64_t>(sizeof(float));
    int64_t n = 1;
    if (partitioner.kind == Partitioner::Kind::MinSize)
      n = std::clamp<int64_t>(size / partitioner.min_shard_bytes, 1, partitioner.max_shards);
    else if (partitioner.kind == Partitioner::Kind::FixedShards) n = partitioner.num_shards;
    else if (partitioner.kind == Partitioner::Kind::MaxSize)  // as few shards as keep each within the size
      n = std::min<int64_t>((size + partitioner.max_shard_bytes - 1) / partitioner.max_shard_bytes,
                            partitioner.max_shards > 0 ? partitioner.max_shards : std::numeric_limits<int64_t>::max());
    n = std::max<int64_t>(1, std::min({n, static_cast<int64_t>(servers), s.rank() > 0 ? rows : 1}));
    for (int64_t k = 0; k < n; ++k) {
      int64_t begin = rows * k / n, end = rows * (k + 1) / n;
      shards.push_back({static_cast<int>(v), static_cast<int>(k), 0, begin, end});
      bytes.push_back(rows == 0 ? 0 : size / rows * (end - begin));
    }
  }
  std::vector<size_t> order(shards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(servers), 0);
  std::vector<std::vector<int>> holds(shapes.size());  // the servers holding a shard of each variable
  for (size_t i : order) {
    ShardPlacement& p = shards[i];
    auto& taken = holds[static_cast<size_t>(p.variable)];
    int best = -1;
    for (int s = 0; s < servers; ++s) {
      bool free = std::find(taken.begin(), taken.end(), s) == taken.end();
      if (free && (best < 0 || load[static_cast<size_t>(s)] < load[static_cast<size_t>(best)])) best = s;
    }
    p.server = best;
    taken.push_back(best);
    load[static_cast<size_t>(best)] += bytes[i];
  }
  return shards;
}

}  // namespace tandem::distribute
