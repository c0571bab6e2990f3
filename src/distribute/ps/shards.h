#pragma once
// The trainable variables as the servers hold them: each variable's shards (rows of its first
// axis) on their servers. Pulls write the servers' values into the variables; pushes cut the
// gradients into the shards.
#include <cstdint>
#include <vector>

#include "distribute/ps/cluster_link.h"
#include "tandem/distribute/parameter_server.h"

namespace tandem::distribute::ps {

class ShardTable {
 public:
  ShardTable(std::vector<Variable*> variables, int servers, const Partitioner& partitioner);
  const std::vector<ShardPlacement>& placement() const { return placement_; }
  const std::vector<Variable*>& variables() const { return variables_; }
  // The indices (into placement()) of server s's shards.
  const std::vector<size_t>& on_server(int s) const { return on_server_[static_cast<size_t>(s)]; }
  // Shard p's rows of `t` (a tensor of its variable's shape): a view.
  static Tensor rows(const Tensor& t, const ShardPlacement& p);
  // A pull of every server's values: the requests out; then each server's answer into the
  // variables (the servers' versions).
  void request_pull(ClusterLink& link, uint32_t sender);
  std::vector<int64_t> receive_pull(ClusterLink& link);
  // Server s's answer (Values or State) into `targets` (one tensor per variable: the values, or
  // for aux k > 0 the k-th optimizer slot when slots is given).
  void write(int s, const Incoming& message, std::vector<Tensor>& values,
             std::vector<std::vector<Tensor>>* slots) const;

 private:
  std::vector<Variable*> variables_;
  std::vector<ShardPlacement> placement_;
  std::vector<std::vector<size_t>> on_server_;
};

}  // namespace tandem::distribute::ps
