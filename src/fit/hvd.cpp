// The Horovod-style facade (tandem/hvd.h): a Context over a communicator, the optimizer hook
// that averages gradients over the processes through fused buffers, and the three callbacks.
#include "tandem/hvd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "tandem/collectives/replica_context.h"
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

// The optimizer hook: gradients summed over backward_passes_per_step passes, then packed into
// fusion buffers that are all-reduced while the next is packed, then averaged.
class Averager : public GradientHook {
 public:
  explicit Averager(DistributedOptimizerOptions options) : options_(options) {
    if (options_.backward_passes_per_step < 1)
      fail("hvd::DistributedOptimizer: backward_passes_per_step must be at least 1, got {}",
           options_.backward_passes_per_step);
    if (options_.op != ReduceOp::Mean && options_.op != ReduceOp::Sum)
      fail("hvd::DistributedOptimizer: op must be Mean or Sum");
    if (options_.fusion_bytes < 0)
      fail("hvd::DistributedOptimizer: fusion_bytes must be 0 (no fusion) or positive, got {}", options_.fusion_bytes);
  }

  bool before_update(std::span<Variable* const> variables, std::span<const Tensor> gradients,
                     std::vector<Tensor>& out) override {
    const distribute::ReplicaContext* replica = distribute::replica_context();
    if (replica != nullptr && replica->num_replicas > 1)
      fail(
          "hvd::DistributedOptimizer averages over processes, one replica each; under a strategy with {} replicas use "
          "MultiWorkerMirroredStrategy instead",
          replica->num_replicas);
    accumulate(variables, gradients);
    if (++passes_ < options_.backward_passes_per_step) return false;
    passes_ = 0;
    reduce();
    out.assign(views_.begin(), views_.end());  // views of the reduced buffer, which the next step reuses
    return true;
  }

 private:
  // The gradients summed into one buffer (kept from step to step), of which views_ are the
  // per-variable views.
  void accumulate(std::span<Variable* const> variables, std::span<const Tensor> gradients) {
    if (passes_ == 0) layout(variables, gradients);
    else if (gradients.size() != offsets_.size())
      fail("hvd::DistributedOptimizer: pass {} of a step gave {} gradients, the first {}", passes_ + 1,
           gradients.size(), offsets_.size());
    float* sum = sum_.data<float>();
    for (size_t i = 0; i < gradients.size(); ++i) {
      Tensor g = gradients[i].contiguous();
      const float* from = g.data<float>();
      float* to = sum + offsets_[i];
      if (passes_ == 0) std::copy_n(from, views_[i].numel(), to);
      else
        for (int64_t k = 0; k < views_[i].numel(); ++k) to[k] += from[k];
    }
  }

  void layout(std::span<Variable* const> variables, std::span<const Tensor> gradients) {
    bool same = views_.size() == gradients.size();
    for (size_t i = 0; same && i < gradients.size(); ++i) same = views_[i].shape() == gradients[i].shape();
    if (same) return;
    offsets_.clear();
    int64_t total = 0;
    for (size_t i = 0; i < gradients.size(); ++i) {
      check_float(gradients[i], "DistributedOptimizer");
      if (!(gradients[i].shape() == variables[i]->value.shape()))
        fail("hvd::DistributedOptimizer: the gradient of \"{}\" has shape {}, the variable {}", variables[i]->name,
             gradients[i].shape().str(), variables[i]->value.shape().str());
      offsets_.push_back(total);
      total += gradients[i].numel();
    }
    sum_ = Tensor::empty({total});
    views_.clear();
    for (size_t i = 0; i < gradients.size(); ++i)
      views_.push_back(sum_.slice(offsets_[i], offsets_[i] + gradients[i].numel()).reshape(gradients[i].shape()));
  }

  // Buffers of fusion_bytes (whole gradients; 0: one per gradient), all-reduced asynchronously in
  // order (on the MPI communicator's thread); the communicator sums each element in rank order,
  // so the cuts change no bit.
  void reduce() {
    const Context& ctx = resolve(options_.context);
    distribute::Communicator& comm = ctx.communicator();
    float* sum = sum_.data<float>();
    works_.clear();
    int64_t from = 0, total = sum_.numel();
    for (size_t i = 0; i < offsets_.size(); ++i) {
      int64_t end = i + 1 < offsets_.size() ? offsets_[i + 1] : total;
      if (end == total && works_.empty()) {  // one buffer: on this thread (no hand-off to wait for)
        comm.all_reduce_compressed(sum, total, ReduceOp::Sum, options_.compression);
      } else if (end == total || (end - from) * static_cast<int64_t>(sizeof(float)) >= options_.fusion_bytes) {
        works_.push_back(comm.all_reduce_compressed_async(sum + from, end - from, ReduceOp::Sum, options_.compression));
        from = end;
      }
    }
    for (auto& w : works_) w->wait();
    float scale = 1.0f;
    if (options_.op == ReduceOp::Mean) scale /= static_cast<float>(ctx.size());
    if (options_.average_aggregated_gradients) scale /= static_cast<float>(options_.backward_passes_per_step);
    if (scale != 1.0f)
      for (int64_t k = 0; k < total; ++k) sum[k] *= scale;
  }

  DistributedOptimizerOptions options_;
  int passes_ = 0;
  std::vector<int64_t> offsets_;
  Tensor sum_;
  std::vector<Tensor> views_;
  std::vector<std::unique_ptr<distribute::Work>> works_;
};

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

void Context::broadcast_model(Sequential& model, int root) const {
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
void broadcast_variables(Sequential& model, int root) { context().broadcast_model(model, root); }

std::unique_ptr<Optimizer> DistributedOptimizer(std::unique_ptr<Optimizer> optimizer,
                                                DistributedOptimizerOptions options) {
  if (!optimizer) fail("hvd::DistributedOptimizer: no optimizer");
  if (optimizer->gradient_hook() != nullptr) fail("hvd::DistributedOptimizer: the optimizer is already distributed");
  optimizer->set_gradient_hook(std::make_shared<Averager>(options));
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
