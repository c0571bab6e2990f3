// fit's step under PipelineStrategy: the global batch cut into D·M micro-batches (micro-batch k:
// rows [B·k/K, B·(k+1)/K), K = D·M; copy c of the pipeline takes k in [c·M, (c+1)·M)), every
// device running its stage's schedule of forwards and backwards over its copy's micro-batches,
// activations and gradients handed through its pipe group; then each stage's gradients, added in
// micro-batch order (and over the copies), one update of its layers, and the moving statistics of
// its batch normalization moved once.
#include <chrono>
#include <exception>

#include "distribute/device_step.h"
#include "distribute/replica_threads.h"
#include "distribute/step_body.h"
#include "tandem/autograd.h"
#include "tandem/distribute/pipeline.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/distribute/train_step.h"
#include "tandem/ops.h"
#include "tandem/timeline.h"

namespace tandem::distribute {
namespace {

using Clock = std::chrono::steady_clock;

// One action of a stage's schedule, the schedule a list of them (as PyTorch's
// pipelining/schedules.py keeps one): the forward or the backward of one micro-batch.
struct Action {
  enum class Kind : uint8_t { Forward, Backward };
  Kind kind;
  int micro_batch;
};

// A stage's actions over its micro-batches, each kind in micro-batch order: GPipe's every forward
// then every backward; 1F1B's warm-up forwards, then one forward and one backward, then the
// cool-down backwards.
std::vector<Action> schedule_of(PipelineSchedule schedule, int stage, int stages, int micro_batches) {
  std::vector<Action> order;
  int forwards = 0, backwards = 0;
  auto forward = [&] { order.push_back({Action::Kind::Forward, forwards++}); };
  auto backward = [&] { order.push_back({Action::Kind::Backward, backwards++}); };
  if (schedule == PipelineSchedule::GPipe) {
    for (int i = 0; i < micro_batches; ++i) forward();
    for (int i = 0; i < micro_batches; ++i) backward();
    return order;
  }
  int warmup = std::min(stages - stage - 1, micro_batches);
  for (int i = 0; i < warmup; ++i) forward();
  for (int i = warmup; i < micro_batches; ++i) {
    forward();
    backward();
  }
  for (int i = 0; i < warmup; ++i) backward();
  return order;
}

class PipelineStep : public DeviceStep {
 public:
  PipelineStep(PipelineExtended& strategy, const StepParts& parts)
      : DeviceStep(strategy, parts),
        strategy_(strategy),
        stages_(strategy.pipeline_options().num_stages),
        copies_(strategy.pipeline_options().data_replicas),
        micro_(strategy.pipeline_options().micro_batches),
        devices_(static_cast<size_t>(strategy.num_local_replicas())) {
    strategy.set_model_optimizer(&optimizer_);
    for (int d = 0; d < replicas_.size(); ++d) {
      Device& device = devices_[static_cast<size_t>(d)];
      int g = first_ + d;
      device.row = copies_ > 1 ? fmt::format("copy {} stage {}", g / stages_, g % stages_)
                               : fmt::format("stage {}", g % stages_);
      device.order = schedule_of(strategy.pipeline_options().schedule, g % stages_, stages_, micro_);
      for (const auto& l : replicas_[d].layers)
        if (std::optional<layers::Layer::MovingStatistics> m = l->moving_statistics()) device.moving.push_back(*m);
    }
  }
  // Over processes: every stage's variables to every process (validation, callbacks, evaluation).
  void finish_epoch() override { strategy_.share_stages(); }

  std::optional<double> run(const GlobalBatch& batch, uint64_t key) override {
    Tensor x, y;  // stage 0 takes the inputs, the last stages the labels
    whole_batch(batch, x, y);
    int64_t rows = x.dim(0);
    int total = copies_ * micro_;
    if (copies_ > 1 && rows < copies_)
      fail("{}: a global batch of {} row{} for {} copies of the pipeline; give each at least one (a larger batch)",
           strategy_.name(), rows, rows == 1 ? "" : "s", copies_);
    results_.assign(static_cast<size_t>(total), {});
    if (batch.step == 0)  // the epoch's figures start again
      for (Device& device : devices_) device.epoch_busy = device.epoch_window = 0.0;
    make_optimizers();
    double penalty = copy_penalty(replicas_.size(), [&](int d) { return first_ + d < stages_; });
    Clock::time_point start = Clock::now();
    try {
      strategy_.devices().run([&](int d) {
        try {
          run_device(d, x, y, batch.weights, rows, key);
        } catch (const std::exception& e) {  // the other stages and copies stop waiting for this one
          strategy_.pipe_group(d).abort(e.what());
          strategy_.data_group(d).abort(e.what());
          throw;
        }
      });
    } catch (...) {
      results_.clear();
      if (processes_ == nullptr) strategy_.make_groups();  // over processes the failure ends the job
      throw;
    }
    // The step's window: until the last device has its gradients; each device's idle share of it.
    Clock::time_point end = start;
    for (const Device& device : devices_) end = std::max(end, device.done);
    double window = std::chrono::duration<double>(end - start).count();
    for (Device& device : devices_) {
      device.epoch_busy += device.busy;
      device.epoch_window += window;
    }
    optimizer_.set_iterations(optimizers_[0]->iterations());
    // The last stages' losses and predictions (over processes, summed over them).
    double loss = report(
        total, rows,
        [&](int k) -> std::optional<Reported> {
          const Result& r = results_[static_cast<size_t>(k)];
          if (!r.predictions.defined()) return {};  // no rows, or another process's
          return Reported{y.slice(r.begin, r.end), r.predictions, r.loss_sum};
        },
        penalty);
    results_.clear();
    return loss;
  }

  std::vector<std::pair<std::string, double>> epoch_figures() override {
    double idle = 0.0;
    for (const Device& device : devices_)
      idle += device.epoch_window > 0.0 ? 1.0 - device.epoch_busy / device.epoch_window : 0.0;
    return {{"bubble", idle / static_cast<double>(devices_.size())},
            {"bubble_ideal", static_cast<double>(stages_ - 1) / static_cast<double>(micro_ + stages_ - 1)}};
  }

 private:
  struct Device {
    std::string row;                                      // the timeline's
    std::vector<Action> order;                            // the schedule
    std::vector<layers::Layer::MovingStatistics> moving;  // its stage's layers' (batch normalization's), in order
    double busy = 0.0, epoch_busy = 0.0, epoch_window = 0.0;
    Clock::time_point done;  // of the step's forwards and backwards, its gradients made
  };
  // One micro-batch on one device, from its forward to its backward.
  struct InFlight {
    std::unique_ptr<GradientTape> tape;
    Tensor input, output;  // output: the loss ÷ the global batch on the last stage
  };
  // What the last stage of a copy leaves for fit's metrics, per micro-batch.
  struct Result {
    int64_t begin = 0, end = 0;
    double loss_sum = 0.0;
    Tensor predictions;
  };

  // Each device's optimizer: for the first copy, a part of the model's optimizer on the model's
  // own variables (its slots the model's, so that checkpoints read them as they are), made again
  // each step (the model's learning rate and steps as they are now); the other copies keep
  // copies of the slots of their own, made again when the model's optimizer is another.
  void make_optimizers() {
    if (processes_ != nullptr) {  // one device here: its stage's slots alone
      std::span<Variable* const> own = replicas_[0].trainable;
      auto state = optimizer_.state();
      if (state.size() > 1 + own.size() * static_cast<size_t>(optimizer_.slots_per_variable()))
        optimizer_.load_state(state, own);  // restored whole: this stage's part kept
      else optimizer_.build(own);
      optimizers_.resize(1);
      optimizers_[0] = optimizer_.part(own);
      return;
    }
    std::vector<Variable*> whole;
    for (int s = 0; s < stages_; ++s)
      for (Variable* v : replicas_[s].trainable) whole.push_back(v);
    optimizer_.build(whole);
    if (copies_ > 1 && copy_optimizer_id_ != optimizer_.id()) {
      optimizers_.resize(devices_.size());
      for (size_t d = static_cast<size_t>(stages_); d < devices_.size(); ++d)
        optimizers_[d] = optimizer_.replicate(replicas_[static_cast<int>(d)].trainable);
      copy_optimizer_id_ = optimizer_.id();
    }
    optimizers_.resize(devices_.size());
    for (int s = 0; s < stages_; ++s) optimizers_[static_cast<size_t>(s)] = optimizer_.part(replicas_[s].trainable);
    float lr = optimizer_.current_learning_rate();
    for (size_t d = static_cast<size_t>(stages_); d < devices_.size(); ++d)
      if (optimizers_[d]->current_learning_rate() != lr) optimizers_[d]->set_learning_rate(lr);  // a callback's
  }

  void run_device(int d, const Tensor& x, const Tensor& y, const Tensor& sample_weights, int64_t rows, uint64_t key) {
    Device& device = devices_[static_cast<size_t>(d)];
    ModelReplicas::Replica& stage_replica = replicas_[d];
    const auto& stack = stage_replica.layers;
    int g = first_ + d, stage = g % stages_, copy = g / stages_, total = copies_ * micro_;
    bool first = stage == 0, last = stage + 1 == stages_;
    Communicator& pipe = strategy_.pipe_group(d);
    Timeline* timeline = strategy_.timeline();
    device.busy = 0.0;
    ops::DeferredKernelGradients kernels;
    if (strategy_.pipeline_options().defer_kernel_gradients)
      for (const auto& l : stack)
        if (int k = l->deferrable_kernel().kernel; k >= 0 && l->variables()[static_cast<size_t>(k)].trainable)
          kernels.defer(l->variables()[static_cast<size_t>(k)].value);
    // The tape's sources: the trainable variables whose gradients backward makes (`of`: their
    // places among the trainable ones), then the stage's input.
    std::vector<Tensor> sources;
    std::vector<size_t> of;
    for (size_t i = 0; i < stage_replica.trainable.size(); ++i)
      if (!kernels.defers(stage_replica.trainable[i]->value)) {
        sources.push_back(stage_replica.trainable[i]->value);
        of.push_back(i);
      }
    size_t weights = sources.size();
    std::vector<Tensor> sum(stage_replica.trainable.size()), grads(weights + (first ? 0 : 1));
    std::vector<InFlight> flight(static_cast<size_t>(micro_));
    ops::DeferredMovingStatistics moving;
    auto shape_of = [](int64_t n, const Shape& sample) {
      Shape shape{n};
      for (int64_t v : sample) shape.push_back(v);
      return shape;
    };
    auto busy = [&](Clock::time_point since) {
      Clock::time_point now = Clock::now();
      device.busy += std::chrono::duration<double>(now - since).count();
      return now;
    };
    // Sends do not wait for their receiver (over MPI, a stage sending its activations while the
    // next sends it a gradient would wait on each other); each tensor lives until its send is done.
    std::vector<std::pair<std::unique_ptr<Work>, Tensor>> sending;
    auto send = [&](Tensor t, int to, int tag) {
      std::erase_if(sending, [](const auto& s) { return s.first->done(); });
      sending.emplace_back(pipe.send_async(t.data<float>(), t.numel(), DataType::Float32, to, tag), t);
    };
    for (const Action& action : device.order) {
      bool forward = action.kind == Action::Kind::Forward;
      int m = action.micro_batch, k = copy * micro_ + m;
      int64_t begin = rows * k / total, end = rows * (k + 1) / total;
      if (begin == end) continue;  // no rows: every stage skips it
      InFlight& f = flight[static_cast<size_t>(m)];
      if (forward) {
        Tensor h;
        if (first) {
          h = x.slice(begin, end);
        } else {
          h = Tensor::empty(shape_of(
              end - begin, stage_replica.graph ? stage_replica.graph->input_shapes[0] : stack.front()->input_shape()));
          pipe.recv(h.data<float>(), h.numel(), DataType::Float32, stage - 1, 2 * m);
        }
        Clock::time_point since = Clock::now();
        f.tape = std::make_unique<GradientTape>();
        if (!first) f.tape->watch(h);
        f.input = h;
        BatchRows at{seed_,
                     key,
                     begin,
                     rows,
                     &kernels,
                     &moving,
                     sample_weights.defined() ? sample_weights.slice(begin, end)
                                              : Tensor()};  // the micro-batch's rows of one device's step
        Tensor out = layers::call_network(stage_replica.network(), h, at.context());
        RowsLoss loss;
        if (last) {
          loss = rows_loss(loss_, y.slice(begin, end), out, at);
          f.output = loss.loss;
        } else {
          f.output = out.contiguous();
        }
        f.tape->end_recording();
        if (last) results_[static_cast<size_t>(k)] = {begin, end, ops::sum(loss.per_sample).item(), out};
        if (!last) send(f.output, stage + 1, 2 * m);
        if (timeline != nullptr) timeline->record("forward", since, busy(since), device.row.c_str());
        else busy(since);
        continue;
      }
      Tensor upstream;
      if (!last) {
        upstream = Tensor::empty(f.output.shape());
        pipe.recv(upstream.data<float>(), upstream.numel(), DataType::Float32, stage + 1, 2 * m + 1);
      }
      Clock::time_point since = Clock::now();
      if (!first) sources.push_back(f.input);
      backward(*f.tape, f.output, {sources, grads, nullptr, upstream});  // from the loss on the last stage
      if (!first) {
        sources.pop_back();
        send(grads.back().contiguous(), stage - 1, 2 * m + 1);
      }
      for (size_t i = 0; i < weights; ++i) {
        Tensor& to = sum[of[i]];
        to = to.defined() ? ops::add(to, grads[i]) : grads[i];
      }
      f = InFlight{};
      Clock::time_point now = busy(since);
      if (timeline != nullptr) timeline->record("backward", since, now, device.row.c_str());
    }
    for (auto& [work, tensor] : sending) work->wait();
    Clock::time_point since = Clock::now();
    for (size_t i = 0; i < sum.size(); ++i) {
      const Tensor& v = stage_replica.trainable[i]->value;
      if (kernels.defers(v)) sum[i] = kernels.gradient(v);
      else if (!sum[i].defined()) sum[i] = Tensor::zeros(v.shape());  // a copy with no rows: zeros to the sums
    }
    device.done = busy(since);
    if (timeline != nullptr) timeline->record("kernel gradients", since, device.done, device.row.c_str());
    since = Clock::now();
    if (copies_ > 1) {
      std::vector<std::span<float>> buffers;
      for (Tensor& g : sum) {
        g = g.contiguous();
        buffers.emplace_back(g.data<float>(), static_cast<size_t>(g.numel()));
      }
      Communicator& data = strategy_.data_group(d);
      data.all_reduce(buffers, ReduceOp::Sum);
      for (const layers::Layer::MovingStatistics& m : device.moving) {  // toward every copy's micro-batches
        std::vector<double> sums = moving.sums(*m.mean, m.mean->numel());
        data.all_reduce(sums.data(), static_cast<int64_t>(sums.size()), DataType::Float64, ReduceOp::Sum);
        ops::DeferredMovingStatistics::move(*m.mean, *m.variance, sums, m.momentum);
      }
    } else {
      moving.apply();
    }
    optimizers_[static_cast<size_t>(d)]->check_clipping_applies("PipelineStrategy", true, stages_ == 1);
    optimizers_[static_cast<size_t>(d)]->apply_here(stage_replica.trainable, sum);
    if (timeline != nullptr) timeline->record("update", since, Clock::now(), device.row.c_str());
  }

  PipelineExtended& strategy_;
  int stages_, copies_, micro_;
  std::vector<Device> devices_;
  std::vector<Result> results_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  uint64_t copy_optimizer_id_ = 0;
};

}  // namespace

std::unique_ptr<StepRunner> PipelineExtended::make_step(const StepParts& parts) {
  return std::make_unique<PipelineStep>(*this, parts);
}

}  // namespace tandem::distribute
