// The Horovod-style facade (tandem/hvd.h): a Context over a communicator, the optimizer's route
// that averages gradients over the processes (distribute's PerProcessUpdate), and the three callbacks.
#include "tandem/hvd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "tandem/distribute/per_process.h"
#include "tandem/error.h"
#include "tandem/model.h"

namespace tandem::hvd {
namespace {

std::unique_ptr<Context> initialized;  // init()'s: the facade's only state

const Context& resolve(const Context* given) { return given != nullptr ? *given : context(); }

void check_float(const Tensor& t, const char* what) {
  if (t.dtype() != DType::Float32)
    fail("hvd::{}: the tensor is {}; only float32 tensors are reduced", what, dtype_name(t.dtype()));
}

}  // namespace

Context::Context(std::shared_ptr<distribute::Communicator> communicator) : comm_(std::move(communicator)) {
  if (!comm_) fail("hvd::Context: no communicator");
}

Tensor Context::allreduce(const Tensor& tensor, ReduceOp op, Compression wire) const {
  check_float(tensor, "allreduce");
  std::vector<float> values = tensor.to_vector();
  if (wire != Compression::None)
    comm_->all_reduce_compressed(values.data(), static_cast<int64_t>(values.size()), op, wire);
  else comm_->all_reduce(std::span<float>(values), op);
  return Tensor::from_vector(tensor.shape(), std::span<const float>(values));
}

Tensor Context::allgather(const Tensor& tensor) const {
  check_float(tensor, "allgather");
  if (tensor.rank() == 0) fail("hvd::allgather: a scalar has no first axis to concatenate along");
  // Every process's shape: the first dimensions may differ, the rest must agree.
  auto n = static_cast<size_t>(comm_->size());
  std::vector<int64_t> shape(8, -1), shapes(8 * n);
  for (int d = 0; d < tensor.rank(); ++d) shape[static_cast<size_t>(d)] = tensor.shape()[d];
  comm_->all_gather(shape.data(), 8, shapes.data(), distribute::DataType::Int64);
  int64_t rows = 0, most = 0;
  for (size_t r = 0; r < n; ++r) {
    for (size_t d = 1; d < 8; ++d)
      if (shapes[8 * r + d] != shape[d]) {
        std::vector<int64_t> theirs(shapes.begin() + static_cast<std::ptrdiff_t>(8 * r),
                                    shapes.begin() + static_cast<std::ptrdiff_t>(8 * r + 8));
        theirs.erase(std::find(theirs.begin(), theirs.end(), -1), theirs.end());
        fail("hvd::allgather: rank {} passes shape {}, rank {} passes {}: only the first dimension may differ", rank(),
             tensor.shape().str(), r, Shape(std::span<const int64_t>(theirs)).str());
      }
    rows += shapes[8 * r];
    most = std::max(most, shapes[8 * r]);
  }
  int64_t per_row = tensor.numel() / std::max<int64_t>(1, tensor.shape()[0]);
  if (tensor.shape()[0] == 0) {
    per_row = 1;
    for (int d = 1; d < tensor.rank(); ++d) per_row *= tensor.shape()[d];
  }
  std::vector<float> mine = tensor.to_vector();
  mine.resize(static_cast<size_t>(most * per_row), 0.0f);  // padded to the longest
  std::vector<float> all(static_cast<size_t>(most * per_row) * n);
  comm_->all_gather(std::span<const float>(mine), std::span<float>(all));
  std::vector<float> out;
  out.reserve(static_cast<size_t>(rows * per_row));
  for (size_t r = 0; r < n; ++r) {
    auto at = all.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(most * per_row));
    out.insert(out.end(), at, at + static_cast<std::ptrdiff_t>(shapes[8 * r] * per_row));
  }
  Shape result = tensor.shape();
  result[0] = rows;
  return Tensor::from_vector(result, std::span<const float>(out));
}

Tensor Context::broadcast(const Tensor& tensor, int root) const {
  check_float(tensor, "broadcast");
  Tensor out = tensor.clone();
  broadcast_floats(std::span<const Tensor>(&out, 1), root, "broadcast");
  return out;
}

// The tensors' float32 values replaced by root's in place, in one broadcast, after checking that
// every process passes as many values.
void Context::broadcast_floats(std::span<const Tensor> tensors, int root, const char* what) const {
  int64_t total = 0;
  for (const Tensor& t : tensors) {
    check_float(t, what);
    if (!t.is_contiguous()) fail("hvd::{}: a tensor is not contiguous", what);
    total += t.numel();
  }
  int64_t least = total, most = total;
  comm_->all_reduce(&least, 1, distribute::DataType::Int64, ReduceOp::Min);
  comm_->all_reduce(&most, 1, distribute::DataType::Int64, ReduceOp::Max);
  if (least != most)
    fail("hvd::{}: processes pass from {} to {} values (this one, rank {}, {}): every process must pass the same", what,
         least, most, rank(), total);
  std::vector<float> packed(static_cast<size_t>(total));
  float* at = packed.data();
  for (const Tensor& t : tensors) at = std::copy_n(t.data<float>(), t.numel(), at);
  comm_->broadcast(std::span<float>(packed), root);
  at = packed.data();
  for (const Tensor& t : tensors) {
    std::copy_n(at, t.numel(), const_cast<Tensor&>(t).data<float>());
    at += t.numel();
  }
}

void Context::broadcast_variables(std::span<Variable* const> variables, int root) const {
  std::vector<Tensor> values;
  for (Variable* v : variables) values.push_back(v->value);
  broadcast_floats(values, root, "broadcast_variables");
}

void Context::broadcast_model(Model& model, int root) const {
  if (model.compiled()) {
    std::vector<Variable*> trainable = model.trainable_variables();
    model.optimizer().build(trainable);  // slots exist everywhere before root's are copied in
  }
  std::vector<Tensor> values;
  for (auto& [name, tensor] : model.state())
    if (tensor.dtype() == DType::Float32) values.push_back(tensor);  // the step count is an int and equal
  broadcast_floats(values, root, "broadcast_variables");
}

Context& init(const distribute::MpiOptions& options) {
  if (initialized) return *initialized;
  std::shared_ptr<distribute::Communicator> comm;
  if (distribute::mpi_built() && distribute::started_by_mpi_launcher())
    comm = distribute::make_mpi_world_communicator(options);
  else comm = std::move(distribute::make_in_process_communicators(1, options.timeout)[0]);
  initialized = std::make_unique<Context>(std::move(comm));
  // Released at exit before MPI ends (handlers run in reverse order: MPI's was registered first).
  static bool registered = false;
  if (!std::exchange(registered, true)) std::atexit(shutdown);
  return *initialized;
}
bool is_initialized() { return initialized != nullptr; }
Context& context() {
  if (!initialized) fail("hvd: call hvd::init() first");
  return *initialized;
}
void shutdown() { initialized.reset(); }

int rank() { return context().rank(); }
int size() { return context().size(); }
int local_rank() { return context().local_rank(); }
int local_size() { return context().local_size(); }
Tensor allreduce(const Tensor& tensor, ReduceOp op, Compression wire) { return context().allreduce(tensor, op, wire); }
Tensor allgather(const Tensor& tensor) { return context().allgather(tensor); }
Tensor broadcast(const Tensor& tensor, int root) { return context().broadcast(tensor, root); }
void broadcast_variables(std::span<Variable* const> variables, int root) {
  context().broadcast_variables(variables, root);
}
void broadcast_variables(Model& model, int root) { context().broadcast_model(model, root); }

std::unique_ptr<Optimizer> DistributedOptimizer(std::unique_ptr<Optimizer> optimizer,
                                                DistributedOptimizerOptions options) {
  const char* who = "hvd::DistributedOptimizer";
  if (!optimizer) fail("{}: no optimizer", who);
  if (optimizer->route() != nullptr) fail("{}: the optimizer is already distributed", who);
  if (options.op != ReduceOp::Mean && options.op != ReduceOp::Sum) fail("{}: op must be Mean or Sum", who);
  // A strategy of one replica per process, through the strategies' reducer.
  optimizer->set_route(std::make_shared<distribute::PerProcessUpdate>(
      [context = options.context]() -> distribute::Communicator& { return resolve(context).communicator(); },
      distribute::PerProcessOptions{.bucket_bytes = options.fusion_bytes,
                                    .compression = options.compression,
                                    .backward_passes_per_step = options.backward_passes_per_step,
                                    .average_aggregated_gradients = options.average_aggregated_gradients,
                                    .mean = options.op == ReduceOp::Mean,
                                    .name = who}));
  return optimizer;
}

BroadcastGlobalVariables::BroadcastGlobalVariables(int root, const Context* context) : root_(root), context_(context) {}
void BroadcastGlobalVariables::on_train_begin(const Logs&) {
  const Context& ctx = resolve(context_);
  if (root_ < 0 || root_ >= ctx.size())
    fail("hvd::BroadcastGlobalVariables: root {} is not a rank (0 to {})", root_, ctx.size() - 1);
  ctx.broadcast_model(*model, root_);
}

MetricAverage::MetricAverage(const Context* context) : context_(context) {}
void MetricAverage::on_epoch_logs(int, Logs& logs) {
  const Context& ctx = resolve(context_);
  std::vector<double> values;
  for (const auto& [name, value] : logs) values.push_back(value);
  int64_t count = static_cast<int64_t>(values.size()), least = count, most = count;
  ctx.communicator().all_reduce(&least, 1, distribute::DataType::Int64, ReduceOp::Min);
  ctx.communicator().all_reduce(&most, 1, distribute::DataType::Int64, ReduceOp::Max);
  if (least != most)
    fail("hvd::MetricAverage: processes log from {} to {} values at an epoch's end (this one {})", least, most, count);
  ctx.communicator().all_reduce(std::span<double>(values), ReduceOp::Mean);
  for (size_t i = 0; i < logs.size(); ++i) logs[i].second = values[i];
}

LearningRateWarmup::LearningRateWarmup(float initial_lr, double warmup_epochs, int64_t steps_per_epoch,
                                       const Context* context)
    : initial_lr_(initial_lr), warmup_epochs_(warmup_epochs), steps_per_epoch_(steps_per_epoch), context_(context) {
  if (!(initial_lr > 0.0f)) fail("hvd::LearningRateWarmup: initial_lr must be positive, got {}", initial_lr);
  if (!(warmup_epochs > 0.0)) fail("hvd::LearningRateWarmup: warmup_epochs must be positive, got {}", warmup_epochs);
  if (steps_per_epoch < 1) fail("hvd::LearningRateWarmup: steps_per_epoch must be at least 1, got {}", steps_per_epoch);
}
void LearningRateWarmup::on_epoch_begin(int epoch, const Logs&) { epoch_ = epoch; }
void LearningRateWarmup::on_batch_begin(int64_t batch, const Logs&) {
  double progress = epoch_ + static_cast<double>(batch) / static_cast<double>(steps_per_epoch_);
  if (done_) return;  // after the warmup the rate is the caller's (a schedule may take over)
  if (progress >= warmup_epochs_) {
    model->optimizer().set_learning_rate(initial_lr_);
    done_ = true;
    return;
  }
  auto n = static_cast<double>(resolve(context_).size());
  double lr = initial_lr_ / n * (progress * (n - 1.0) / warmup_epochs_ + 1.0);
  model->optimizer().set_learning_rate(static_cast<float>(lr));
}

}  // namespace tandem::hvd
