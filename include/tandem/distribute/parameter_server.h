#pragma once
// ParameterServerStrategy (tf.distribute's): a cluster of a chief, workers and parameter servers
// (ClusterSpec, from TF_CONFIG), every task running the same program. The servers hold the
// variables, split into shards placed by size, and the optimizer with its state, and apply the
// updates. The chief runs fit's loop (progress, validation, callbacks, checkpoints) and hands each
// batch to a worker; a worker reads the variables from the servers, computes the batch's
// gradients and pushes them, then reports the batch's loss and predictions to the chief.
//
//   Asynchronous (TensorFlow's default): each worker steps on its own, each push is applied as it
//   arrives (on variables that may have moved since they were read: the staleness is reported).
//   Synchronous (TensorFlow 1's SyncReplicasOptimizer): the workers each take one batch of a
//   round; each server sums the round's gradients and applies one update, which the next round
//   reads.
//
// fit's batch_size is the batch each worker computes per step; an epoch is one pass over the data
// by all the workers together. On worker and server tasks, fit serves the chief until it ends the
// job, and returns an empty history.
//
// In one process (ClusterSpec::local(P, W), or "ps-async:PxW:threads" by name), the servers and
// workers are threads of the chief's process, started by each fit and ended with it: the same
// coordinator, servers, workers, wire format and policies over ZeroMQ's inproc transport (frames
// handed over, not copied), each worker a copy of the model reading fit's tensors in place. What
// needs separate processes (a task's death and restart, keys, --min-workers) is refused.
//
//   auto cluster = distribute::ClusterSpec::from_environment();
//   distribute::ParameterServerStrategy strategy(cluster, {.mode = distribute::PsMode::Synchronous});
//   auto scope = strategy.scope();   ...   model.fit(x, y, {.batch_size = 50});
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/distribute/cluster.h"
#include "tandem/distribute/strategy.h"
#include "tandem/distribute/strategy_registry.h"

namespace tandem::distribute {

// How a variable is cut into shards along its first axis (tf.distribute.experimental.partitioners).
struct Partitioner {
  enum class Kind { None, MinSize, FixedShards, MaxSize };
  Kind kind = Kind::None;
  int64_t min_shard_bytes = int64_t{256} << 10;  // MinSize: shards of at least this many bytes...
  int max_shards = 1;                            // ...and at most this many (MaxSize: 0, no limit)
  int num_shards = 1;                            // FixedShards
  int64_t max_shard_bytes = 0;                   // MaxSize: shards of at most this many bytes
  static Partitioner none() { return {}; }
  static Partitioner min_size(int64_t min_shard_bytes = int64_t{256} << 10, int max_shards = 1) {
    return {Kind::MinSize, min_shard_bytes, max_shards, 1, 0};
  }
  static Partitioner fixed_shards(int num_shards) { return {Kind::FixedShards, 0, 1, num_shards, 0}; }
  static Partitioner max_size(int64_t max_shard_bytes, int max_shards = 0) {
    return {Kind::MaxSize, 0, max_shards, 1, max_shard_bytes};
  }
};

// Shard `shard` of variable `variable`: rows [begin, end) of its first axis, held by `server`.
struct ShardPlacement {
  int variable = 0, shard = 0, server = 0;
  int64_t begin = 0, end = 0;
};
// Every variable's shards (as the partitioner cuts it, at most one per server and per row),
// placed greedily by size: the largest shard first, each on the server holding the fewest bytes
// (the shards of one variable on different servers). Ordered by variable, then shard.
std::vector<ShardPlacement> place_variables(const std::vector<Shape>& shapes, int servers,
                                            const Partitioner& partitioner);

enum class PsMode { Asynchronous, Synchronous };

// `tandem keys DIR`: a new set of CurveZMQ keys for a cluster's --auth in `dir` (server.key/.pub,
// client.key/.pub, allowed/client.pub; secret keys readable by their owner only). Copy the
// directory to every machine of the cluster; add other clients' public keys to DIR/allowed.
void make_cluster_keys(const std::string& dir);

struct ParameterServerOptions {
  PsMode mode = PsMode::Asynchronous;
  Partitioner partitioner;
  // Asynchronous: a worker asks for the next step's variables right after its push, so that the
  // pull overlaps the chief's hand-over of the next step: more samples/s, each gradient about one
  // update staler (measured: mlp5 on 2 workers, 0.97× against 0.81× one process's samples/s at
  // batch 256; mean staleness 1.9 against 1.2 on 3 workers at batch 50, and 3 epochs' accuracy
  // about 0.2 points lower).
  bool prefetch = false;
  // Asynchronous with bounded staleness (stale synchronous parallel, Ho et al. 2013; "ps-ssp:S"):
  // no worker starts its step t + S + 1 before every worker has finished its step t. The chief
  // holds a worker that is S steps ahead of the slowest until that one finishes; the servers,
  // whose clocks are the truth, refuse a push further ahead and keep the histogram of how far
  // ahead each push was (logged when they stop). 0 is synchronous (rounds); -1: no bound.
  int max_staleness = -1;
  // Synchronous with backup workers ("ps-sync:B"): each round applies the first W - B gradients
  // computed on its version and drops the later ones as stale (counted per epoch in the progress
  // line), so that a round does not wait for the B slowest workers. Every worker steps as soon as
  // it is free; its gradient is its batch's share of the W - B batches' mean.
  int backup_workers = 0;
  // CurveZMQ (--auth DIR, from `tandem keys DIR`): every ZeroMQ connection encrypted and
  // authenticated, the servers and the chief admitting only clients whose public keys are in
  // DIR/allowed. Without it the chief and the servers must listen on loopback addresses, unless
  // `insecure` (--insecure) says that the network is trusted.
  std::string auth_dir;
  bool insecure = false;
  // Asynchronous (no staleness bound): `record` (--record FILE) writes, at each epoch's end, which
  // worker took each step and the order in which each server answered the workers' pulls and
  // applied their pushes; `replay` (--replay FILE) runs the job again forcing that order, so that
  // the final weights are bitwise the recorded run's (the same program, data, seed and cluster
  // shape; another worker or server count is refused, naming both). Written and read by the chief.
  std::string record, replay;
  // Synchronous (no backup workers): a worker that dies is dropped from the round in progress (its
  // batch not trained; the servers apply the others' gradients) and the rounds go on with the
  // workers left, until fewer than `min_workers` are (--min-workers): then the job ends.
  int min_workers = 1;
  // Every wait on another task; a task that does not answer within it is named and the job ends.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // An in-process cluster (ClusterSpec::local): the intra-op threads of each worker (0: this
  // machine's usable cores shared among the workers, at least one each).
  int threads_per_worker = 0;
  // An in-process cluster: worker w computes on worker_devices[w] (a GPU), its copy of the
  // variables there, pulling and pushing through the host (the servers hold theirs on the host);
  // empty: on the host. A launched worker computes where its fit places the model (--device).
  std::vector<Device> worker_devices{};
};

class ParameterServerExtended : public StrategyExtended {
 public:
  explicit ParameterServerExtended(ClusterSpec cluster, ParameterServerOptions options = {});
  ~ParameterServerExtended() override;
  std::string name() const override;  // "ps-async:1x3" (servers × workers)
  // The chief computes nothing but evaluation, on one replica on its own thread.
  int num_replicas_in_sync() const override { return 1; }
  void for_each_replica(const std::function<void(int replica)>& fn) override;
  Communicator& communicator(int replica) override;
  bool is_chief() const override;
  std::unique_ptr<StepRunner> make_step(const StepParts& parts) override;
  bool serves() const override;
  void serve(const StepParts& parts) override;
  void collect_state(std::vector<std::pair<std::string, Tensor>>& state) override;
  std::string set_phase(const std::string& phase) override;  // on the cluster's control connections

  const ClusterSpec& cluster() const { return cluster_; }
  const ParameterServerOptions& options() const { return options_; }
  // The chief, asynchronous: how many steps ahead of the slowest worker's finished steps each step
  // started (the staleness histogram of the report), over every fit; empty elsewhere.
  std::map<int64_t, int64_t> steps_ahead() const;
  // On the chief: the steps each worker trained (their results came back), over every fit.
  std::vector<int64_t> replica_runs() const override;
  // On the chief: {"steps_ahead_of_slowest": steps_ahead()} where steps were started.
  std::map<std::string, std::map<int64_t, int64_t>> report_counts() const override;
  int num_workers() const { return cluster_.count("worker"); }
  int num_servers() const { return cluster_.count("ps"); }

  struct Chief;  // the chief's part (src/distribute/ps/chief.h)

 private:
  struct Links;  // the task's sockets and control connections (src/distribute/ps/cluster_link.h)
  // An in-process cluster's server and worker threads (src/distribute/ps/local_cluster.cpp).
  struct LocalTasks;
  // This task's links (made by every task together; in process, over local_'s context) and, on the
  // chief, its part.
  void connect();
  // In process: the cluster's threads started for a fit (any before stopped), with the fit's
  // runner, which stops them when it ends; stopped (those of `generation` when it is still the
  // running one; 0: whichever).
  std::unique_ptr<StepRunner> start_local(const StepParts& parts);
  void stop_local(uint64_t generation = 0);
  ClusterSpec cluster_;
  ParameterServerOptions options_;
  std::vector<std::unique_ptr<Communicator>> comm_;
  std::unique_ptr<Links> links_;
  std::unique_ptr<Chief> chief_;
  std::unique_ptr<LocalTasks> local_;
  uint64_t local_generation_ = 0;
  std::map<int64_t, int64_t> steps_ahead_before_;  // in process: the fits' before the running one
  std::vector<int64_t> worker_steps_before_;       // likewise
};

class ParameterServerStrategy : public StrategyOf<ParameterServerExtended> {
 public:
  explicit ParameterServerStrategy(ClusterSpec cluster, ParameterServerOptions options = {})
      : StrategyOf(std::make_unique<ParameterServerExtended>(std::move(cluster), std::move(options))) {}
};

// The settings fit's flags and the Python module give the parameter-server family
// (StrategySettings::of): the cluster spec's file or TF_CONFIG's JSON text (both empty: the
// TF_CONFIG environment variable), or an in-process cluster (the names' "ps-async:PxW:threads",
// Python's ParameterServerStrategy() without a cluster) of `local_ps` servers and `local_workers`
// workers (-1: one per usable core); the size above which a variable is split into shards over the
// servers (0: never); and the options (prefetch, auth_dir, insecure, record, replay, min_workers;
// the mode, staleness bound and backup workers come from the name, the timeout and the
// partitioner from the above).
struct ParameterServerSettings {
  std::string cluster_file;
  std::string cluster_json;
  int64_t shard_bytes = 0;
  bool in_process = false;
  int local_ps = 1, local_workers = -1;
  ParameterServerOptions ps;
};

// The strategy from its options (strategy_registry.h's make_* say what these add): the cluster in
// process (ParameterServerSettings::in_process), else its cluster_json, else its cluster_file,
// else TF_CONFIG.
std::unique_ptr<Strategy> make_parameter_servers(ParameterServerOptions options, const StrategySettings& settings);

}  // namespace tandem::distribute
