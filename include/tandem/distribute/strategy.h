#pragma once
// Strategy: how a model trains across replicas, switched by one line as tf.distribute does.
// A model made inside a strategy's scope trains under it:
//   distribute::MirroredStrategy mirrored(2);
//   auto scope = mirrored.scope();
//   Sequential model;  ...  model.fit(x, y, {.batch_size = 256});   // 256 = the global batch
//
// A custom training loop runs a step function on every replica, as tf.distribute does:
//   auto batches = mirrored.distribute_dataset(dataset).iterate(epoch);  // global batches, split
//   while (auto batch = batches.next()) {
//     auto losses = mirrored.run([&](const data::Element& b) { ... return loss; }, *batch);
//     float loss = mirrored.reduce(ReduceOp::Sum, losses).item();
//   }
// Inside the step function the model and its optimizer act for the replica running it: the
// model computes with that replica's variables, and Optimizer::apply hands the gradients to the
// strategy's update rule, which reduces them across replicas (the strategy's policy) and updates.
// fit runs the same hooks through one training step (tandem/distribute/train_step.h).
// Past 500 lines: the seam (StrategyExtended, Strategy) with the strategies a program reaches
// without another header (default, one device, mirrored, central storage), as tf.distribute has them.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tandem/collectives/communicator.h"
#include "tandem/collectives/replica_context.h"
#include "tandem/data/dataset.h"
#include "tandem/distribute/update_rule.h"
#include "tandem/error.h"
#include "tandem/layers.h"
#include "tandem/tensor.h"

namespace tandem::layers {
struct Graph;  // tandem/graph.h
}

namespace tandem::distribute {

class Strategy;
class StepRunner;      // tandem/distribute/step_runner.h
class ReplicaThreads;  // src/distribute/replica_threads.h
struct StepParts;

// One value per replica (tf.distribute's PerReplica): what run() takes and returns.
template <class T>
struct PerReplica {
  std::vector<T> values;
  int64_t first_row = 0;  // of values[0] in the global batch (a split batch)
  int size() const { return static_cast<int>(values.size()); }
  T& operator[](int replica) { return values.at(static_cast<size_t>(replica)); }
  const T& operator[](int replica) const { return values.at(static_cast<size_t>(replica)); }
};

// The global batches of a dataset, each split along its first axis into one per replica
// (rows [B·r/N, B·(r+1)/N) to replica r): the global batch is the per-replica batch × N.
// Across processes, each gets the parts of its replicas [first, first + local).
// A global batch cut into parts: part p is rows [row[p], row[p + 1]); replica r computes parts
// [first_part[r], first_part[r + 1]) (none: it contributes zero gradients).
struct BatchSplit {
  std::vector<int64_t> row;
  std::vector<int> first_part;
  int parts() const { return static_cast<int>(row.size()) - 1; }
  int64_t begin(int p) const { return row[static_cast<size_t>(p)]; }
  int64_t end(int p) const { return row[static_cast<size_t>(p) + 1]; }
  // `parts` even parts of `rows` rows (part p: [B·p/P, B·(p+1)/P)), replica r computing parts
  // [P·r/N, P·(r+1)/N); reuses the vectors' memory.
  void even(int64_t rows, int parts, int replicas);
};

class DistributedDataset {
 public:
  // The strategy must outlive the dataset and its iterators.
  DistributedDataset(data::Dataset dataset, const Strategy& strategy)
      : dataset_(std::move(dataset)), strategy_(&strategy) {}
  class Iterator {
   public:
    Iterator(std::unique_ptr<data::Iterator> it, const Strategy& strategy) : it_(std::move(it)), strategy_(&strategy) {}
    // The next global batch split per replica (this process's replicas) as the strategy cuts a
    // custom loop's batch (replica_rows: by default a replica's parts of fit's split); nullopt at
    // the end of the pass. A batch with fewer rows than replicas leaves some with none (0 rows): they
    // contribute zeros, as in fit.
    std::optional<PerReplica<data::Element>> next();

   private:
    std::unique_ptr<data::Iterator> it_;
    const Strategy* strategy_;
  };
  Iterator iterate(int epoch = 0) const { return Iterator(dataset_.iterate(epoch), *strategy_); }

 private:
  data::Dataset dataset_;
  const Strategy* strategy_;
};

// How a step's gradients meet across the replicas (StrategyExtended::gradient_reduction): one mechanism,
// the reducer of src/distribute/gradient_reducer.cpp, with these policies.
struct GradientReduction {
  enum class Kind {
    Grouped,   // one all-reduce over every gradient after backward, where backward left them
    Bucketed,  // packed as backward finishes them and all-reduced bucket_bytes at a time while it goes on
    Ordered,   // every part's gradients gathered and summed in part order, whichever replica computed
               // which: with fixed parts, the same bits for any number of replicas
    None,      // not reduced: each replica hands its own to the update rule (replicas that step alone)
  };
  Kind kind = Kind::Grouped;
  // Bucketed (Horovod's tensor fusion): a bucket is all-reduced once it holds bucket_bytes, or
  // once its first gradient has waited cycle_time (0: no limit), or when backward ends. Sums
  // run in rank order whatever the buckets hold, so neither setting changes any bit.
  int64_t bucket_bytes = 0;
  std::chrono::microseconds cycle_time{0};
  // Grouped and Bucketed: gradients (and their sums) rounded to 16 bits on the wire.
  Compression compression = Compression::None;
};

// The hooks a strategy implements and the runners call (tf.distribute's StrategyExtended): how
// replicas run, where their variables live, how a batch is cut and gradients meet, the step
// runner, checkpoints, processes. A user holds a Strategy, which owns one of these (each strategy
// its own kind: MirroredExtended, ParameterServerExtended...); a runner (fit's loop, TrainStep, the
// strategies' rooms, the command line's reports) reaches it through Strategy::extended(). A new
// strategy derives from StrategyExtended (or one of its kinds) and is held by a Strategy.
class StrategyExtended {
 public:
  virtual ~StrategyExtended();
  StrategyExtended(const StrategyExtended&) = delete;
  StrategyExtended& operator=(const StrategyExtended&) = delete;
  // The Strategy that holds this one (what a replica context names); null while this is being
  // made (a constructor that already runs its replicas, to split their groups).
  Strategy* strategy() const { return strategy_; }
  virtual std::string name() const = 0;          // "mirrored:2"
  virtual int num_replicas_in_sync() const = 0;  // over every process
  // Processes (MultiWorkerMirroredStrategy): this one runs num_local_replicas() of the replicas,
  // numbered from first_local_replica() among all; one process has them all. Replica indices
  // given to the hooks below (for_each_replica, communicator, replica_layer) are local.
  virtual int num_local_replicas() const { return num_replicas_in_sync(); }
  virtual int first_local_replica() const { return 0; }
  // One handle per process over the processes (null: this is the only one): what each process
  // computes for its own rows (the step's loss, the metrics) is summed over it.
  virtual Communicator* worker_communicator() { return nullptr; }
  // Whether this process writes checkpoints, logs and reports (the chief, worker 0).
  virtual bool is_chief() const { return true; }
  // Runs fn(replica) once per replica, each on its own thread (MirroredStrategy: replica 0 on
  // the calling one) with its replica context set, and waits: how the replicas run (all in
  // every step here; a strategy whose workers run ahead would run them its way). If any replica
  // throws, the others' collectives fail too and the first error is rethrown here. By default on
  // the executors the strategy runs its replicas on (run_replicas_on).
  virtual void for_each_replica(const std::function<void(int replica)>& fn);
  // Replica r's handle on the group the replicas reduce in (by default the executors' group).
  virtual Communicator& communicator(int replica);
  // The intra-op threads each of this process's replicas runs with, where the strategy runs
  // them on threads of their own (0: the replicas are not its threads).
  virtual int threads_per_replica() const;
  // Counts a run's report gives beside its figures, by name (the parameter-server chief's steps by
  // how far ahead of the slowest worker each started); none by default.
  virtual std::map<std::string, std::map<int64_t, int64_t>> report_counts() const { return {}; }
  // The jobs (a step's share, a custom loop's run) each of this process's replicas or devices has
  // run since the strategy was made: what shows that they ran (a parameter-server chief: the steps
  // each worker trained). Empty where the strategy does not run replicas on threads of its own.
  virtual std::vector<int64_t> replica_runs() const;
  // Replica r's handle on the group the global batch is split over (ReplicaContext::batch_group):
  // by default all the replicas; null where each computes the whole batch.
  virtual Communicator* batch_group(int replica) { return &communicator(replica); }

  // The device each of this process's replicas computes on, its variables placed there (replica r
  // on element r); empty: where the model's layers are (the host), every replica alike.
  virtual std::vector<Device> replica_devices() const { return {}; }
  // Where replica r's variables live (r > 0; replica 0 uses the model's own layers): by default
  // a copy of its own (mirrored); central storage shares the trainable ones.
  virtual std::shared_ptr<layers::Layer> replica_layer(const layers::Layer& layer, int replica) const;
  // Replica r's whole stack: by default the model's own layers for replica 0, replica_layer of
  // each for the others, placed on replica_devices()[r] where there are such (the model's own
  // then live on the first). A strategy that splits layers (model parallelism) makes every replica's.
  virtual std::vector<std::shared_ptr<layers::Layer>> replica_layers(
      const std::vector<std::shared_ptr<layers::Layer>>& layers, int replica) const;
  // Replica r's graph, for a model that is one (`graph` over the model's `layers`; null: a chain),
  // asked before replica_layers: by default the whole graph; a pipeline's stage, its part.
  virtual std::shared_ptr<const layers::Graph> replica_graph(const std::vector<std::shared_ptr<layers::Layer>>& layers,
                                                             std::shared_ptr<const layers::Graph> graph,
                                                             int replica) const {
    (void)layers, (void)replica;
    return graph;
  }
  // Whether the strategy runs models that are graphs (a Functional's layers connected by
  // layers::Graph); one that cuts the layers as a chain (model parallelism) says no, and a graph is
  // refused, naming it.
  virtual bool runs_graphs() const { return true; }
  // Who applies the update, after which reduction: installed on every replica's thread, so that
  // Optimizer::apply follows it. By default the gradients are summed over the replicas and every
  // replica updates its own copy with its own slots; central storage updates once.
  virtual UpdateRule& update_rule() const;
  // The optimizer this process's replica `replica` updates its copy of the variables with:
  // `optimizer` itself for the first local replica, else a copy of its slots kept here, made on
  // the first call for this optimizer and state (Optimizer::id) since forget_replica_optimizers().
  // Every local replica of the step calls it (the copies are made between two barriers).
  Optimizer& replica_optimizer(Optimizer& optimizer, const ReplicaContext& replica,
                               std::span<Variable* const> variables);
  // Drops the copies: the next replicated update copies the optimizer's slots again (the
  // replicas' variables were made again from replica 0's).
  void forget_replica_optimizers();
  // How fit's global batch of `rows` rows is cut into parts and which replica computes which.
  // By default one part per replica, rows [B·r/N, B·(r+1)/N) to replica r.
  virtual void split_batch(int64_t rows, BatchSplit& split) const;
  // The rows [begin, end) of a global batch of `rows` rows that this process's replica `replica`
  // computes in a custom loop (a distributed dataset's batch; Python's run cuts its arguments so):
  // by default its parts of split_batch. Model parallelism's devices each take their copy's rows whole.
  virtual std::pair<int64_t, int64_t> replica_rows(int64_t rows, int replica) const;
  // How the step reduces the replicas' gradients before the update rule applies them.
  virtual GradientReduction gradient_reduction() const { return {}; }
  // The runner of fit's steps for a model under this strategy (tandem/distribute/step_runner.h):
  // by default the synchronous data-parallel step (TrainStep), which splits each global batch,
  // runs every replica, reduces by gradient_reduction() and applies by update_rule(). A strategy
  // whose steps run another way (workers handed steps asynchronously, pipeline stages) makes its own.
  virtual std::unique_ptr<StepRunner> make_step(const StepParts& parts);
  // What a checkpoint saves: the model's state as this process holds it (variables, optimizer
  // slots), which the strategy may complete or replace with the authoritative copy (a
  // parameter-server strategy pulls it from the servers). By default it is kept as it is.
  virtual void collect_state(std::vector<std::pair<std::string, Tensor>>& state) { (void)state; }
  // Whether collect_state is collective over the workers and supplies the optimizer's slots, which
  // the model's optimizer then does not keep (ZeRO's pieces): every worker takes part in each
  // checkpoint (the ones that do not write call Sequential::state() and drop it).
  virtual bool collects_state_together() const { return false; }
  // Whether this process serves another that runs fit's loop (a parameter server, a worker that
  // is handed steps) instead of running the loop itself: fit then calls serve(parts), which
  // returns when the job ends.
  virtual bool serves() const { return false; }
  // The phase of the job this process is in, said to the other processes (set_job_phase); returns
  // the phase before. By default through the worker communicator (one process: nothing).
  virtual std::string set_phase(const std::string& phase) {
    Communicator* workers = worker_communicator();
    return workers != nullptr ? workers->set_phase(phase) : std::string();
  }
  virtual void serve(const StepParts& parts) { (void)parts; }
  // Where the training step, its reducer and the communicators record what they do (null:
  // nowhere); the timeline must outlive the training.
  virtual void set_timeline(Timeline* timeline) { timeline_ = timeline; }
  Timeline* timeline() const { return timeline_; }
  // Replica r's first row in the global batch that run() is running, split; -1 when unknown
  // (a model-parallel strategy's devices all compute the whole batch: 0).
  virtual int64_t first_row(int r) const { return first_rows_.empty() ? -1 : first_rows_[static_cast<size_t>(r)]; }

 protected:
  StrategyExtended();
  // The executors this strategy's replicas (or devices) run on: a part the strategy holds and
  // outlives this call (threads today; src/distribute/replica_threads.h), which the hooks above
  // use by default.
  void run_replicas_on(ReplicaThreads& executors) { executors_ = &executors; }

 private:
  friend class Strategy;  // sets strategy_, and first_rows_ while run() runs
  ReplicaThreads& executors() const;
  // The split batch's first rows while Strategy::run runs one (empty: none).
  std::vector<int64_t> first_rows_;
  Strategy* strategy_ = nullptr;
  Timeline* timeline_ = nullptr;
  ReplicaThreads* executors_ = nullptr;
  struct ReplicaOptimizers;  // replica_optimizer's copies (src/distribute/replica_optimizers.cpp)
  std::unique_ptr<ReplicaOptimizers> replica_optimizers_;
};

// What a user does with a strategy, as tf.distribute.Strategy: its scope, run a step function on
// every replica, reduce or gather what they return, split a dataset's batches. Its hooks are the
// StrategyExtended it holds (extended()); each strategy below is a Strategy made from its own.
class Strategy {
 public:
  explicit Strategy(std::unique_ptr<StrategyExtended> extended);
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;
  std::string name() const { return extended_->name(); }
  int num_replicas_in_sync() const { return extended_->num_replicas_in_sync(); }
  StrategyExtended& extended() { return *extended_; }
  const StrategyExtended& extended() const { return *extended_; }

  // fn(args[r]) on every replica r (or fn() with no args): the per-replica results.
  template <class F, class A>
  auto run(F&& fn, const PerReplica<A>& args) {
    check_per_replica(args.size(), "run: per-replica arguments");
    std::vector<int64_t> first_rows;
    if constexpr (std::is_same_v<A, data::Element>) first_rows = first_rows_of(args);
    FirstRows during(extended_->first_rows_, std::move(first_rows));
    return collect([&](int r) -> decltype(auto) { return fn(args[r]); });
  }
  template <class F>
  auto run(F&& fn) {
    return collect([&](int) -> decltype(auto) { return fn(); });
  }
  // Elementwise over the replicas' tensors (same shapes), in replica order: summed, averaged, min or
  // max; over several processes, every process's replicas (collective over the workers).
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& values);
  // This process's replicas' tensors concatenated along `axis`, in replica order.
  Tensor gather(const PerReplica<Tensor>& values, int axis = 0);
  DistributedDataset distribute_dataset(const data::Dataset& dataset) const { return {dataset, *this}; }
  // fn(replica) for every replica, on this thread: per-replica inputs made by the caller.
  template <class F>
  auto distribute_values_from_function(F&& fn) {
    PerReplica<std::invoke_result_t<F&, int>> out;
    for (int r = 0; r < extended_->num_local_replicas(); ++r) out.values.push_back(fn(r));
    return out;
  }
  // While alive, models constructed on this thread train under the strategy (which must then
  // outlive them: a model keeps a pointer to it, as a Keras model keeps its strategy).
  class Scope {
   public:
    explicit Scope(Strategy* s);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    size_t depth_;  // the scopes open on this thread before this one
  };
  Scope scope() { return Scope(this); }

 private:
  // The running split batch's first rows, for the time of one run().
  struct FirstRows {
    FirstRows(std::vector<int64_t>& slot, std::vector<int64_t> rows) : slot_(slot) { slot_ = std::move(rows); }
    ~FirstRows() { slot_.clear(); }
    std::vector<int64_t>& slot_;
  };
  static std::vector<int64_t> first_rows_of(const PerReplica<data::Element>& parts) {
    std::vector<int64_t> first;
    int64_t at = parts.first_row;
    for (const data::Element& part : parts.values) {
      first.push_back(at);
      at += part.empty() || part[0].rank() == 0 ? 0 : part[0].dim(0);
    }
    return first;
  }
  void check_per_replica(int size, const char* what) const {
    int local = extended_->num_local_replicas();
    if (size != local)
      fail("{}: {} values for {} replicas of {}{}", what, size, local, name(),
           local == num_replicas_in_sync() ? "" : " in this process");
  }
  template <class G>
  auto collect(G&& g) {
    using R = std::invoke_result_t<G&, int>;
    if constexpr (std::is_void_v<R>) {
      extended_->for_each_replica([&](int r) { g(r); });
    } else {
      PerReplica<std::decay_t<R>> out;
      out.values.resize(static_cast<size_t>(extended_->num_local_replicas()));
      extended_->for_each_replica([&](int r) { out.values[static_cast<size_t>(r)] = g(r); });
      return out;
    }
  }
  std::unique_ptr<StrategyExtended> extended_;
};

// A strategy whose hooks are an E (a StrategyExtended): extended() gives them as an E.
template <class E>
class StrategyOf : public Strategy {
 public:
  explicit StrategyOf(std::unique_ptr<E> extended) : Strategy(std::move(extended)) {}
  E& extended() { return static_cast<E&>(Strategy::extended()); }
  const E& extended() const { return static_cast<const E&>(Strategy::extended()); }
};

// The strategy of the innermost live scope on this thread, or null (the default strategy). One
// stack of scopes per thread, which Strategy::Scope and, for a binding whose scopes are not C++
// objects (Python's `with`), enter_scope and exit_scope open and close; exit_scope refuses a
// scope that is not the innermost.
Strategy* current_strategy();
void enter_scope(Strategy* s);
void exit_scope(Strategy* s);

// The phase of the job this process is in ("training"): said to the other processes of `strategy`
// (one process: nothing), so that a worker that dies or stops is named with what it was doing.
// Returns the phase before.
inline std::string set_job_phase(Strategy& strategy, const std::string& phase) {
  return strategy.extended().set_phase(phase);
}

// set_job_phase for a scope ("checkpoint writing"), then the phase before.
class JobPhase {
 public:
  JobPhase(Strategy& strategy, const std::string& phase)
      : strategy_(strategy), before_(strategy.extended().set_phase(phase)) {}
  ~JobPhase() { strategy_.extended().set_phase(before_); }
  JobPhase(const JobPhase&) = delete;
  JobPhase& operator=(const JobPhase&) = delete;

 private:
  Strategy& strategy_;
  std::string before_;
};

// The strategy of a model made outside any scope (tf.distribute's default strategy): one replica
// on the calling thread, no replica context, no reduction, the optimizer applied as it is. Each
// such model owns one.
class DefaultExtended : public StrategyExtended {
 public:
  DefaultExtended();
  std::string name() const override { return "default"; }
  int num_replicas_in_sync() const override { return 1; }
  void for_each_replica(const std::function<void(int replica)>& fn) override { fn(0); }
  Communicator& communicator(int replica) override { return *comm_.at(static_cast<size_t>(replica)); }
  GradientReduction gradient_reduction() const override { return {GradientReduction::Kind::None}; }
  UpdateRule& update_rule() const override;

 private:
  std::vector<std::unique_ptr<Communicator>> comm_;
};

class DefaultStrategy : public StrategyOf<DefaultExtended> {
 public:
  DefaultStrategy() : StrategyOf(std::make_unique<DefaultExtended>()) {}
};

// Everything on one device (the calling thread), through the strategy interface: what the
// default strategy does, made explicit (tf.distribute.OneDeviceStrategy).
class OneDeviceExtended : public StrategyExtended {
 public:
  OneDeviceExtended();
  std::string name() const override { return "one_device"; }
  int num_replicas_in_sync() const override { return 1; }
  void for_each_replica(const std::function<void(int replica)>& fn) override;
  Communicator& communicator(int replica) override { return *comm_.at(static_cast<size_t>(replica)); }

 private:
  std::vector<std::unique_ptr<Communicator>> comm_;
};

class OneDeviceStrategy : public StrategyOf<OneDeviceExtended> {
 public:
  OneDeviceStrategy() : StrategyOf(std::make_unique<OneDeviceExtended>()) {}
};

struct MirroredOptions {
  int num_replicas = 0;         // 0: one per core
  int threads_per_replica = 0;  // intra-op threads of each replica; 0: usable cores ÷ replicas (at least 1)
  // Bitwise-identical training whatever the number of replicas (up to micro_batches) for the
  // same global batch and seed: the global batch is cut into micro_batches fixed row ranges,
  // each replica computes the gradients of its micro-batches one by one, and they are summed
  // in micro-batch order (kernels' results do not depend on their thread count). Costs: smaller
  // matrix products, an all-gather of micro_batches gradient copies instead of an all-reduce, and an
  // M-way sum on every replica. BatchNormalization runs layer by layer over a replica's
  // micro-batches: synchronized, with the global batch's statistics; otherwise per micro-batch.
  bool deterministic = false;
  int micro_batches = 8;
  // All-reduce gradients in buckets of this many bytes as soon as backward has finished them,
  // while it goes on with the earlier layers (0: one fused all-reduce after backward). Off by
  // default: with one replica per core the reduction runs on the cores backward needs, and on
  // the 2-core development machine 256 KiB buckets measured ~2% slower than one fused bucket.
  int64_t bucket_bytes = 0;
  // With buckets: also all-reduce a bucket once its first gradient has waited this long (0: no limit).
  std::chrono::microseconds cycle_time{0};
  // Gradients and their sums rounded to 16-bit floats on the wire (not with deterministic).
  Compression compression = Compression::None;
  // Pin replica threads to cores of the affinity mask when there are enough (off where other
  // processes share the machine's cores).
  bool pin_threads = true;
  // One replica per device (tf.distribute.MirroredStrategy(devices=[...])): replica r computes on
  // devices[r], its variables and optimizer slots there (the model's own on devices[0]); each
  // replica's gradients are reduced through the host, and the sums copied back to its device.
  // Empty: the host's cores (num_replicas of them). num_replicas is then 0 or the devices' count.
  std::vector<Device> devices{};
  // The cross-device reduction for `replicas` replicas: one handle per replica, handle r of rank r;
  // null: in-process.
  std::function<std::vector<std::unique_ptr<Communicator>>(int replicas)> cross_device_ops = nullptr;
};

// The settings fit's flags give the mirrored family and multiworker (StrategySettings::of):
// tensor fusion and compression, as MirroredOptions says; and --device's GPUs, of which mirrored:N
// takes the first N, a replica each (mirrored: all of them).
struct DataParallelSettings {
  int64_t bucket_bytes = 0;
  std::chrono::microseconds cycle_time{0};
  Compression compression = Compression::None;
  std::vector<Device> devices{};
};

class MirroredReplicas;  // the mirrored family's part (src/distribute/data_parallel/mirrored_replicas.h)

// One replica per group of cores, variables mirrored, gradients all-reduced every step.
// On the CPU a replica is a thread pinned to its cores of the affinity mask (replica 0: the
// calling thread), with usable cores ÷ replicas intra-op threads; more replicas than cores
// time-share them (at most kMaxThreads replicas).
class MirroredExtended : public StrategyExtended {
 public:
  explicit MirroredExtended(MirroredOptions options);
  ~MirroredExtended() override;
  std::string name() const override;
  int num_replicas_in_sync() const override;
  // Deterministic: micro_batches fixed parts, reduced in order; else one part per replica,
  // grouped or bucketed.
  void split_batch(int64_t rows, BatchSplit& split) const override;
  GradientReduction gradient_reduction() const override;
  std::vector<Device> replica_devices() const override;

 private:
  std::unique_ptr<MirroredReplicas> replicas_;
};

class MirroredStrategy : public StrategyOf<MirroredExtended> {
 public:
  explicit MirroredStrategy(int num_replicas = 0, int threads_per_replica = 0)
      : MirroredStrategy(MirroredOptions{.num_replicas = num_replicas, .threads_per_replica = threads_per_replica}) {}
  explicit MirroredStrategy(MirroredOptions options)
      : StrategyOf(std::make_unique<MirroredExtended>(std::move(options))) {}
};

// Variables live once, on the host; compute is replicated as in MirroredStrategy (replica
// threads read the one copy), the gradients are summed and the update is applied once.
class CentralStorageExtended : public StrategyExtended {
 public:
  explicit CentralStorageExtended(MirroredOptions options);
  ~CentralStorageExtended() override;
  std::string name() const override;
  int num_replicas_in_sync() const override;
  void split_batch(int64_t rows, BatchSplit& split) const override;
  GradientReduction gradient_reduction() const override;
  std::shared_ptr<layers::Layer> replica_layer(const layers::Layer& layer, int replica) const override;
  UpdateRule& update_rule() const override;

 private:
  std::unique_ptr<MirroredReplicas> replicas_;
};

class CentralStorageStrategy : public StrategyOf<CentralStorageExtended> {
 public:
  explicit CentralStorageStrategy(int num_replicas = 0, int threads_per_replica = 0)
      : CentralStorageStrategy(
            MirroredOptions{.num_replicas = num_replicas, .threads_per_replica = threads_per_replica}) {}
  explicit CentralStorageStrategy(MirroredOptions options)
      : StrategyOf(std::make_unique<CentralStorageExtended>(std::move(options))) {}
};

// Strategies by name (make_strategy): tandem/distribute/strategy_registry.h.

// Across the workers of `strategy` (nothing with one process): every worker passes its `text`
// for `what` (the model, the optimizer, the batch size...); where they differ, an Error names
// the first two workers that disagree and both texts. Collective over the workers.
void check_workers_agree(Strategy& strategy, const std::string& what, const std::string& text);

}  // namespace tandem::distribute
