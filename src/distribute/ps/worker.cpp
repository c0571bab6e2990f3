// A worker of a parameter-server cluster (parameter_server.h): it waits for the chief's steps; for
// each it reads the variables from the servers, computes the batch's gradients, pushes them, and
// reports the batch's loss and predictions. While a server is restored, the chief calls the step in
// hand back (Abort): the worker drops it and its connections to the servers (with whatever they
// still owe it), and says so (Aborted).
#include "distribute/ps/worker.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/fault_hooks.h"
#include "distribute/ps/moving_statistics.h"
#include "distribute/step_body.h"
#include "tandem/autograd.h"
#include "tandem/ops.h"

namespace tandem::distribute::ps {

namespace {

// The rows of the batch the chief names by position, read from this task's own copy of the data;
// its labels must be those the chief sent, else the tasks read different data.
Tensor read_batch(ClusterLink& link, const StepParts& parts, int epoch, int64_t step, const Tensor& labels) {
  if (!parts.batch_at)
    fail(
        "ParameterServerStrategy: the chief names its batches by position (its fit reads tensors in memory) but {}'s "
        "fit reads a Dataset stream: every task must run the same program on the same data",
        link.describe(link.task()));
  GlobalBatch batch;
  bool have = parts.batch_at(epoch, step, batch);
  bool same = have && batch.y.dtype() == labels.dtype() && batch.y.shape() == labels.shape() &&
              std::memcmp(batch.y.contiguous().raw(), labels.raw(),
                          static_cast<size_t>(labels.numel()) * dtype_size(labels.dtype())) == 0;
  if (!same)
    fail(
        "ParameterServerStrategy: {}'s training data differ from the chief's: batch {} of epoch {} {} on this task; "
        "every task must read the same dataset (the same files, the same validation split and batch size)",
        link.describe(link.task()), step, epoch + 1,
        !have ? std::string("does not exist")
        : batch.y.dtype() == labels.dtype() && batch.y.shape() == labels.shape()
            ? std::string("has other labels here than on the chief")
            : fmt::format("has labels {} {} here, {} {} on the chief", dtype_name(batch.y.dtype()),
                          batch.y.shape().str(), dtype_name(labels.dtype()), labels.shape().str()));
  return batch.x;
}

// The tests' straggler (core/fault_hooks.h: TANDEM_TEST_PS_SLOW_WORKER=INDEX:MS in the test
// programs and build/tandem-test): MS milliseconds more per step of worker INDEX.
int64_t straggler_delay_ms(int me) {
  const fault_hooks::Hooks& hooks = fault_hooks::hooks();
  return hooks.straggler_ms ? hooks.straggler_ms(me) : 0;
}

struct CalledBack {  // the chief called the step in hand back (stop: the job is ending)
  bool stop = false;
};

}  // namespace

void serve_as_worker(ClusterLink& link, const ParameterServerOptions& options, const StepParts& parts) {
  auto me = static_cast<uint32_t>(link.task().index);
  ModelReplicas::Replica& model = parts.replicas[0];
  ShardTable shards(model.trainable, link.servers(), options.partitioner);
  zmq::socket_t& chief = link.own_socket();
  // Asynchronous with prefetch: the next step's pull goes out right after this step's push, on the same
  // connection (so the server answers it after applying the push), and its answer is read when
  // the next step comes, while the chief hands it over. Synchronous rounds must read the round's
  // update, which the last worker's push makes: they pull when the step comes.
  bool prefetch = options.prefetch && options.mode == PsMode::Asynchronous;
  bool pulled = false;
  int64_t slow_ms = straggler_delay_ms(static_cast<int>(me));
  int64_t steps = 0, dropped = 0;  // backup workers: this worker's steps, and those its round left out
  std::vector<layers::Layer::MovingStatistics> moving_layers = moving_statistics_of(model.layers);

  // One step: pull, forward and backward, push; the result for the chief.
  auto train = [&](const Incoming& step) {
    StepInfo info = decode_step_info(step.items[0]);
    Tensor y = step.items[1].adopt(step.frames), x, weights;
    for (size_t i = 2; i < step.items.size(); ++i) {  // the rows read in place from their frames; their weights
      uint32_t what = step.items[i].header.shard;
      if (what != 2 && what != 3)
        fail("ParameterServerStrategy: a step's item {} is part {}, expected 2 or 3", i, what);
      (what == 2 ? x : weights) = step.items[i].adopt(step.frames);
    }
    if (weights.defined() && (weights.dtype() != DType::Float32 || !(weights.shape() == Shape{y.dim(0)})))
      fail("ParameterServerStrategy: a step's sample weights are {} {}, expected float32 [{}]",
           dtype_name(weights.dtype()), weights.shape().str(), y.dim(0));
    if (!x.defined()) x = read_batch(link, parts, static_cast<int>(info.epoch), info.step, y);

    if (!pulled) shards.request_pull(link, me);
    pulled = false;
    std::vector<int64_t> versions = shards.receive_pull(link);
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));  // the test's straggler
    // As fit's step: this worker's rows of the round, and the weights' penalties, each push its rows'
    // share of them (rows ÷ the update's rows, as its loss): the pushes an update sums (a round's, or
    // a synchronous step's with backup workers) add them once, as one device's step.
    std::vector<Tensor> sources, grads(model.trainable.size());
    for (Variable* v : model.trainable) sources.push_back(v->value);
    Tensor penalty;
    auto rows = static_cast<double>(y.dim(0));
    RowsForward done;
    ops::DeferredMovingStatistics moving;  // batch normalization's, for the chief's model
    {
      GradientTape tape;  // recording until the gradients are made, no further
      done = train_rows(
          tape, model.network(), parts.loss, x, y,
          {parts.seed, static_cast<uint64_t>(step.envelope.aux), info.first_row, info.round_rows, nullptr, &moving,
           weights},
          {sources, grads}, {}, [&](const Tensor& loss) {
            penalty = ops::penalties(model.trainable);
            if (!penalty.defined()) return loss;
            return ops::add(loss, ops::scale(penalty, static_cast<float>(rows / static_cast<double>(info.round_rows))));
          });
    }
    double round_penalty = penalty.defined() ? static_cast<double>(penalty.item()) * rows : 0.0;
    bool sync = options.mode == PsMode::Synchronous;
    PushInfo pushed{info.clock, sync && options.backup_workers == 0 ? step.envelope.aux : -1,  // the key is the round
                    sync ? info.pushes : 0};
    for (int s = 0; s < link.servers(); ++s) {
      Outgoing push(MessageType::Push, me, versions[static_cast<size_t>(s)]);
      push.add(0, 0, encode(pushed), kPushInfoItem);
      for (size_t i : shards.on_server(s)) {
        const ShardPlacement& p = shards.placement()[i];
        push.add(static_cast<uint32_t>(p.variable), static_cast<uint32_t>(p.shard),
                 ShardTable::rows(grads[static_cast<size_t>(p.variable)], p).contiguous().to(Device::cpu()));
      }
      push.send(link.server_sockets()[static_cast<size_t>(s)]);
    }
    if (prefetch) {
      shards.request_pull(link, me);
      pulled = true;
    }
    int64_t staleness = 0;
    for (int s = 0; s < link.servers(); ++s) {
      Incoming answer = link.await(link.server_sockets()[static_cast<size_t>(s)], false, link.describe({"ps", s}));
      if (answer.envelope.type != MessageType::Pushed)
        fail("ParameterServerStrategy: {} refused {}'s gradients: {}", link.describe({"ps", s}),
             link.describe(link.task()), answer.items.empty() ? "" : std::string(answer.items[0].payload));
      staleness = answer.envelope.aux < 0 || staleness < 0 ? -1 : std::max(staleness, answer.envelope.aux);
    }
    ++steps;
    if (staleness < 0) ++dropped;
    Outgoing result(MessageType::Result, me, step.envelope.step, staleness);
    result.add(0, 0,
               Tensor::from_vector(
                   {1}, std::vector<float>{static_cast<float>(ops::sum(done.loss.per_sample).item() + round_penalty)}));
    result.add(0, 1, done.predictions.contiguous());
    if (!moving_layers.empty()) result.add(0, 2, moving_statistics_item(moving, moving_layers));
    return result;
  };

  auto say_steps = [&] {
    if (options.backup_workers > 0)
      std::fprintf(stderr, "%s: %lld steps, %lld of them dropped as stale\n", link.describe(link.task()).c_str(),
                   static_cast<long long>(steps), static_cast<long long>(dropped));
    else std::fprintf(stderr, "%s: %lld steps\n", link.describe(link.task()).c_str(), static_cast<long long>(steps));
  };
  // The servers' connections dropped with whatever they still owe this worker (a server restored).
  auto reconnect = [&] {
    for (int s = 0; s < link.servers(); ++s) link.reconnect_server(s);
    pulled = false;
  };
  // While a step is in hand, only a call back (or the job's end) comes from the chief.
  link.set_wait_hook([&] {
    if (auto message = receive(chief, std::chrono::milliseconds(0), false)) {
      if (message->envelope.type == MessageType::Abort) throw CalledBack{};
      if (message->envelope.type == MessageType::Stop) throw CalledBack{true};
      fail("ParameterServerStrategy: {} got a {} message from the chief during a step", link.describe(link.task()),
           message_type_name(message->envelope.type));
    }
  });
  while (true) {
    Incoming step = link.await_idle(chief, false);
    if (step.envelope.type == MessageType::Stop) {  // a pull's answer left unread: the sockets close
      say_steps();
      return;
    }
    if (step.envelope.type == MessageType::Abort) {  // no step in hand; a prefetched pull may be owed
      reconnect();
      Outgoing(MessageType::Aborted, me).send(chief);
      continue;
    }
    if (step.envelope.type != MessageType::Step || step.items.size() < 2 || step.items.size() > 4)
      fail("ParameterServerStrategy: {} got a {} message from the chief where a step was due",
           link.describe(link.task()), message_type_name(step.envelope.type));
    std::optional<Outgoing> result;
    try {
      result = train(step);
    } catch (const CalledBack& back) {
      reconnect();
      if (back.stop) {
        say_steps();
        return;
      }
      Outgoing(MessageType::Aborted, me, step.envelope.step).send(chief);
      continue;
    }
    result->send(chief);
  }
}

}  // namespace tandem::distribute::ps
