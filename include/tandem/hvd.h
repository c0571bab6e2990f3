#pragma once
// A Horovod-style API (horovod.tensorflow.keras as hvd) for programs written the Horovod way: one
// process per worker, started together by a launcher (`tandem launch -np 4 -- ./train`), each
// training the model on its own shard of the data with its own fit(); the optimizer averages the
// gradients over the processes before each update.
//
//   hvd::init();
//   tandem::set_num_threads(std::max(1, tandem::usable_cores() / hvd::local_size()));  // pin by local rank
//   model.compile(hvd::DistributedOptimizer(std::make_unique<optimizers::SGD>(0.01f * hvd::size())), loss);
//   options.callbacks = {std::make_shared<hvd::BroadcastGlobalVariables>(0), std::make_shared<hvd::MetricAverage>()};
//   if (hvd::rank() == 0) options.callbacks.push_back(std::make_shared<ModelCheckpoint>("ckpt-{epoch}"));
//   model.fit(x.shard(hvd::size(), hvd::rank()) ...);
//
// A thin facade over an explicit Context (the process's communicator): every function and
// callback takes one (null: the one init() made, the only state kept here; the library below
// keeps none). MultiWorkerMirroredStrategy is the same reduction driven by fit instead.
#include <memory>
#include <span>

#include "tandem/callbacks.h"
#include "tandem/collectives/communicator.h"
#include "tandem/collectives/mpi.h"
#include "tandem/optimizers.h"
#include "tandem/tensor.h"

namespace tandem {
class Model;
}

namespace tandem::hvd {

using distribute::Compression;
using distribute::ReduceOp;

class Context {
 public:
  explicit Context(std::shared_ptr<distribute::Communicator> communicator);
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  int local_rank() const { return comm_->local_rank(); }  // among the processes of this machine
  int local_size() const { return comm_->local_size(); }
  distribute::Communicator& communicator() const { return *comm_; }

  // A float32 tensor reduced over the processes (every process passes the same shape).
  Tensor allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::Mean, Compression wire = Compression::None) const;
  // Every process's float32 tensor concatenated along the first axis, in rank order (first
  // dimensions may differ, the others must not).
  Tensor allgather(const Tensor& tensor) const;
  // Root's tensor on every process (the same shape everywhere).
  Tensor broadcast(const Tensor& tensor, int root) const;
  // The variables' values (and what else state() lists) replaced by root's, in place.
  void broadcast_variables(std::span<Variable* const> variables, int root) const;
  // The model's variables and, when compiled, its optimizer's slots (built first), from root.
  void broadcast_model(Model& model, int root) const;

 private:
  void broadcast_floats(std::span<const Tensor> tensors, int root, const char* what) const;
  std::shared_ptr<distribute::Communicator> comm_;
};

// Starts the process's context: over MPI's world under a launcher (`tandem launch`, mpirun,
// srun), else a group of this process alone. Again: the same context.
Context& init(const distribute::MpiOptions& options = {});
bool is_initialized();
Context& context();  // init()'s; an Error before init()
void shutdown();     // forgets init()'s context (MPI ends with the process)

int rank();
int size();
int local_rank();
int local_size();
Tensor allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::Mean, Compression wire = Compression::None);
Tensor allgather(const Tensor& tensor);
Tensor broadcast(const Tensor& tensor, int root);
void broadcast_variables(std::span<Variable* const> variables, int root);
void broadcast_variables(Model& model, int root);

struct DistributedOptimizerOptions {
  Compression compression = Compression::None;  // gradients on the wire
  // Backward passes whose gradients are summed locally before one reduction and update.
  int backward_passes_per_step = 1;
  bool average_aggregated_gradients = false;  // divide that local sum by the passes
  ReduceOp op = ReduceOp::Mean;               // over the processes: Mean (Horovod's Average) or Sum
  // Tensor fusion (the strategies' GradientReducer, bucketed): gradients packed into buffers of
  // this many bytes (whole gradients; 0: one per gradient), each all-reduced on the MPI
  // communicator's thread while the next is handed to it (one buffer: on the calling thread).
  // Fused or not, each element's sum is taken in rank order: the bits do not depend on it.
  int64_t fusion_bytes = int64_t{64} << 20;
  const Context* context = nullptr;  // null: init()'s
};
// `optimizer` itself, averaging its gradients over the processes before each update (its state,
// checkpoints and learning rate are its own, as before): its own update route is
// distribute::PerProcessUpdate, the update rule of one replica per process.
std::unique_ptr<Optimizer> DistributedOptimizer(std::unique_ptr<Optimizer> optimizer,
                                                DistributedOptimizerOptions options = {});

// At the start of training, root's weights and optimizer state on every process (so that all
// start alike, from random weights or a checkpoint restored on root). Put it after a callback
// that restores a backup.
class BroadcastGlobalVariables : public Callback {
 public:
  explicit BroadcastGlobalVariables(int root = 0, const Context* context = nullptr);
  void on_train_begin(const Logs&) override;

 private:
  int root_;
  const Context* context_;
};

// Each epoch's logged values (loss, metrics, validation) averaged over the processes, so that
// every process logs and decides on the same figures.
class MetricAverage : public Callback {
 public:
  explicit MetricAverage(const Context* context = nullptr);
  void on_epoch_logs(int epoch, Logs& logs) override;

 private:
  const Context* context_;
};

// Horovod's learning-rate warmup (Goyal et al., 2017): over the first warmup_epochs, the rate
// rises from initial_lr ÷ size to initial_lr, step by step; then it is initial_lr.
class LearningRateWarmup : public Callback {
 public:
  LearningRateWarmup(float initial_lr, double warmup_epochs, int64_t steps_per_epoch, const Context* context = nullptr);
  void on_epoch_begin(int epoch, const Logs&) override;
  void on_batch_begin(int64_t batch, const Logs&) override;

 private:
  float initial_lr_;
  double warmup_epochs_;
  int64_t steps_per_epoch_;
  const Context* context_;
  int epoch_ = 0;
  bool done_ = false;
};

}  // namespace tandem::hvd
