// The chief's step runner under ParameterServerStrategy (coordinator.h): made and ended, fit's
// batches handed out, their results taken in, rounds.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "distribute/ps/coordinator.h"
#include "tandem/error.h"

namespace tandem::distribute {
namespace ps {
namespace {

// FNV-1a over the variables' bytes, as hex.
std::string weights_hash(const std::vector<Variable*>& variables) {
  uint64_t h = 1469598103934665603ull;
  for (const Variable* v : variables) {
    Tensor t = v->value.contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0, n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); i < n; ++i)
      h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

}  // namespace

Coordinator::Coordinator(ParameterServerExtended::Chief& chief, const StepParts& parts)
    : chief_(chief),
      policy_(make_dispatch_policy(chief.options)),
      link_(chief.link),
      metrics_(parts.metrics),
      loss_(parts.loss_metric),
      moving_(moving_statistics_of(parts.replicas[0].layers)),
      by_position_(parts.batch_at != nullptr) {
  chief_.initialize(parts.replicas[0].trainable, parts.optimizer);
  if (!chief_.options.record.empty() || chief_.replay) {
    std::string weights = weights_hash(parts.replicas[0].trainable);
    chief_.record.initial_weights = weights;
    if (chief_.replay && chief_.replay->initial_weights != weights)
      fail(
          "ParameterServerStrategy: --replay {}: the recorded run began from other weights (hash {}, this run's {}): "
          "another model, seed or checkpoint",
          chief_.options.replay, chief_.replay->initial_weights, weights);
  }
  steps_ = rounds_ = parts.optimizer.iterations();  // dropout keys go on from a restored step
  clocks_.started.assign(static_cast<size_t>(link_.workers()), 0);
  clocks_.finished.assign(static_cast<size_t>(link_.workers()), 0);
  clocks_.alive.assign(static_cast<size_t>(link_.workers()), true);
  // A worker lost (one that missed the start, or died in an earlier fit) and not back has no step.
  for (int w = link_.workers() - 1; w >= 0; --w) {
    clocks_.alive[static_cast<size_t>(w)] = !link_.control().lost(worker_rank(w));
    if (clocks_.alive[static_cast<size_t>(w)]) free_.push_back(w);
  }
  if (servers_may_die()) {
    link_.set_wait_hook([this] {
      for (int s = 0; s < link_.servers(); ++s)
        if (s != restoring_server_ && link_.control().lost(1 + s)) throw ps::ServerLost(link_.describe({"ps", s}));
    });
    chief_.restore_lost = [this] { restore_after_lost_read(); };
  }
}

Coordinator::~Coordinator() {
  link_.set_wait_hook(nullptr);
  chief_.restore_lost = nullptr;
  if (copy_epoch_ > 0 && servers_may_die())
    std::fprintf(stderr,
                 "chief: keeping its copy of the servers' state (what a restore starts from) took %.1f ms per "
                 "epoch\n",
                 copy_seconds_ * 1e3 / copy_epoch_);
}

std::optional<double> Coordinator::run(const GlobalBatch& batch, uint64_t) {
  if (epoch_done_) {
    counts_ = {};
    recorded_ = handed_again_ = workers_lost_ = 0;
    not_trained_ = trained_unrecorded_ = reached_some_ = 0;
    epoch_done_ = false;
  }
  Batch b{Tensor(), Tensor(), batch.weights.defined() ? batch.weights.clone() : Tensor(), batch.epoch, batch.step};
  if (batch.x.defined()) {
    b.x = batch.x.clone();  // the batch source may reuse its tensors
    b.y = batch.y.clone();
  } else {
    batch.gather(0, batch.rows, nullptr, b.y);  // the worker reads the rows
  }
  if (!rounds()) {  // each batch to a free worker, as the policy picks it
    hand_again_what_died();
    int64_t pushes = policy_->pushes(workers());
    dispatch(chief_.replay ? take_recorded_worker(b) : take_free_worker(), b, steps_, 0, b.y.dim(0) * pushes, pushes);
    ++steps_;
  } else {
    round_.push_back(std::move(b));
    if (static_cast<int>(round_.size()) >= alive_count()) finish_round();
  }
  return std::nullopt;
}

void Coordinator::finish_epoch() {
  finish_round();
  while (!in_flight_.empty() || !orphans_.empty()) {
    hand_again_what_died();
    if (!in_flight_.empty()) wait_for_change();
  }
  move_pending();
  if (workers_lost_ > 0 && rounds())
    std::fprintf(stderr, "chief: this epoch's batches: %lld trained, %lld not (their worker died)%s%s\n",
                 static_cast<long long>(recorded_ + trained_unrecorded_), static_cast<long long>(not_trained_),
                 trained_unrecorded_ == 0
                     ? ""
                     : fmt::format("; {} of the trained without a result (their worker died after its push)",
                                   trained_unrecorded_)
                           .c_str(),
                 reached_some_ == 0
                     ? ""
                     : fmt::format("; {} of those not trained reached some servers (their worker died while it pushed)",
                                   reached_some_)
                           .c_str());
  else if (workers_lost_ > 0)
    std::fprintf(stderr, "chief: this epoch's %lld steps all trained, %lld of them again after their worker died\n",
                 static_cast<long long>(recorded_), static_cast<long long>(handed_again_));
  for (;;) {  // validation and checkpoints read the servers' variables; a restore starts from them
    try {
      auto began = std::chrono::steady_clock::now();
      chief_.keep_copy();
      copy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (!chief_.options.record.empty()) write_record();
      break;
    } catch (const ps::ServerLost&) {
      restore_after_lost_read();  // from the previous copy; then read again
    }
  }
  ++copy_epoch_;
  epoch_done_ = true;
}

std::vector<std::pair<std::string, double>> Coordinator::epoch_figures() { return policy_->figures(counts_); }

int Coordinator::take_free_worker() {
  int w;
  while ((w = policy_->take(free_, clocks_)) < 0) wait_for_change();
  return w;
}

void Coordinator::dispatch(int w, const Batch& b, int64_t key, int64_t first_row, int64_t round_rows, int64_t pushes) {
  int64_t id = next_id_++;
  Outgoing step(MessageType::Step, 0, id, key);
  int64_t clock = clocks_.started[static_cast<size_t>(w)]++;
  if (policy_->counts_lead()) ++chief_.steps_ahead[clock - clocks_.slowest()];
  step.add(0, 0, encode(StepInfo{first_row, round_rows, pushes, b.epoch, b.step, clock}));
  step.add(0, 1, b.y);
  if (b.x.defined()) step.add(0, 2, b.x);
  if (b.weights.defined()) step.add(0, 3, b.weights);
  in_flight_[id] = Sent{w, b, key, first_row, round_rows, pushes};
  if (!chief_.options.record.empty()) chief_.record.steps.push_back({w, b.epoch, record_field(b.step, "step")});
  try {
    step.send(link_.own_socket(), &link_.worker_route(w));
  } catch (const std::exception&) {  // the worker is gone; its control connection will say so
    if (!workers_may_die()) throw;
    lose_worker(w);
  }
}

void Coordinator::grow_workers(int count) {
  clocks_.alive.resize(static_cast<size_t>(count), false);
  clocks_.started.resize(static_cast<size_t>(count), 0);
  clocks_.finished.resize(static_cast<size_t>(count), 0);
}

void Coordinator::take_messages() {
  watch_workers();
  for (auto wait = std::chrono::milliseconds(20);; wait = std::chrono::milliseconds(0)) {
    std::optional<Incoming> message = ps::receive(link_.own_socket(), wait, true);
    if (!message) return;
    handle(*message);
  }
}

void Coordinator::handle(const Incoming& message) {
  if (message.envelope.type == MessageType::Ready) return greet(message);
  if (message.envelope.type == MessageType::Aborted) {
    auto w = static_cast<int>(message.envelope.variable);
    if (called_back_.erase(w) > 0 && clocks_.alive[static_cast<size_t>(w)]) free_.push_back(w);
    return;
  }
  finish_one(message);
}

std::string Coordinator::waiting_for() const {
  std::string who;
  for (const auto& [id, sent] : in_flight_)
    if (!sent.done) who += (who.empty() ? "" : ", ") + link_.describe({"worker", sent.worker});
  return who;
}

void Coordinator::wait_for_change() {
  // Where workers may die, a worker stopped after its step went out is named by the control plane
  // within the timeout of its stop: the wait leaves it that long before it blames a live one.
  auto patience = link_.timeout() * (workers_may_die() && !in_flight_.empty() ? 2 : 1);
  auto deadline = std::chrono::steady_clock::now() + patience;
  std::optional<Incoming> message;
  while (!message) {
    link_.check_failed();
    size_t orphans = orphans_.size(), free = free_.size();
    watch_workers();
    if (orphans_.size() != orphans || free_.size() != free) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (in_flight_.empty())
        fail("ParameterServerStrategy: no worker is left: every one died and none came back within {} s",
             link_.timeout().count() / 1000.0);
      fail("ParameterServerStrategy: {} did not answer within {} s{}", waiting_for(), patience.count() / 1000.0,
           workers_may_die() ? " though its control connection beat (alive: a step slower than that, or stuck)" : "");
    }
    message = ps::receive(link_.own_socket(), std::min(left, std::chrono::milliseconds(50)), true);
  }
  handle(*message);
}

void Coordinator::finish_one(const Incoming& result) {
  auto it = in_flight_.find(result.envelope.step);
  if (result.envelope.type == MessageType::Result && (it == in_flight_.end() || it->second.done) && workers_may_die())
    return;                                // from a worker taken for dead, whose steps went to others
  size_t items = moving_.empty() ? 2 : 3;  // loss, predictions, batch normalization's statistics
  if (result.envelope.type != MessageType::Result || it == in_flight_.end() || it->second.done ||
      result.items.size() != items)
    fail("ParameterServerStrategy: the chief got a {} message of {} item(s) for step {} from worker {}{}",
         message_type_name(result.envelope.type), result.items.size(), result.envelope.step, result.envelope.variable,
         result.envelope.type == MessageType::Result ? fmt::format(", expected a result of {} items", items) : "");
  Sent& sent = it->second;
  sent.loss = result.items[0].tensor();
  sent.predictions = result.items[1].tensor();
  if (items == 3) sent.moving = result.items[2].tensor();
  sent.done = true;
  sent.applied = result.envelope.aux >= 0;
  ++clocks_.finished[static_cast<size_t>(sent.worker)];
  if (chief_.worker_steps.size() <= static_cast<size_t>(sent.worker))
    chief_.worker_steps.resize(static_cast<size_t>(sent.worker) + 1, 0);
  ++chief_.worker_steps[static_cast<size_t>(sent.worker)];
  if (result.envelope.aux < 0) {
    ++counts_.dropped;
  } else {
    counts_.staleness_sum += result.envelope.aux;
    counts_.staleness_max = std::max(counts_.staleness_max, result.envelope.aux);
    ++counts_.applied;
  }
  if (!rounds()) {
    record(sent);
    int w = sent.worker;
    if (sent.applied && sent.moving.defined()) pending_moving_.emplace(it->first, std::pair{w, sent.moving});
    in_flight_.erase(it);
    move_pending();
    policy_->finished(w, result.envelope.aux < 0, workers(), free_);
  }
}

void Coordinator::move_pending() {
  // In flight are the steps out (asynchronous: a result's is erased as it comes), in order.
  while (!pending_moving_.empty() &&
         (in_flight_.empty() || pending_moving_.begin()->first < in_flight_.begin()->first)) {
    auto first = pending_moving_.begin();
    moving_.add(first->second.second, link_.describe({"worker", first->second.first}));
    moving_.move();
    pending_moving_.erase(first);
  }
}

void Coordinator::record(const Sent& sent) {
  int64_t rows = sent.batch.y.dim(0);
  if (loss_ != nullptr) loss_->update_mean(static_cast<double>(sent.loss.item()) / static_cast<double>(rows), rows);
  for (Metric& m : metrics_) m.update(sent.batch.y, sent.predictions);
  ++recorded_;
}

void Coordinator::finish_round() {
  if (round_.empty()) return;
  int64_t rows = 0, first = 0;
  for (const Batch& b : round_) rows += b.y.dim(0);
  auto pushes = static_cast<int64_t>(round_.size());
  std::vector<int> workers;  // those alive, in order (a worker that died is out of the rounds)
  for (int w = 0; w < this->workers(); ++w)
    if (clocks_.alive[static_cast<size_t>(w)]) workers.push_back(w);
  for (size_t i = 0; i < round_.size(); ++i) {
    dispatch(workers[i], round_[i], rounds_, first, rows, pushes);
    first += round_[i].y.dim(0);
  }
  while (std::any_of(in_flight_.begin(), in_flight_.end(), [](const auto& sent) { return !sent.second.done; }))
    wait_for_change();
  if (round_short_) close_round(static_cast<int64_t>(in_flight_.size()));
  for (auto& [id, sent] : in_flight_) {
    record(sent);
    if (sent.applied && sent.moving.defined()) moving_.add(sent.moving, link_.describe({"worker", sent.worker}));
  }
  moving_.move();  // once, toward the round's average
  in_flight_.clear();
  round_.clear();
  ++rounds_;
}

void Coordinator::close_round(int64_t results) {
  auto& sockets = link_.server_sockets();
  for (auto& socket : sockets) Outgoing(MessageType::CloseRound, 0, rounds_).send(socket);
  int64_t fewest = -1, most = 0;  // the pushes the servers applied the round with
  for (int s = 0; s < link_.servers(); ++s) {
    Incoming answer = link_.await(sockets[static_cast<size_t>(s)], false, link_.describe({"ps", s}));
    if (answer.envelope.type != MessageType::Ready)
      fail("ParameterServerStrategy: {} did not close the round: {}", link_.describe({"ps", s}),
           answer.items.empty() ? "" : std::string(answer.items[0].payload));
    if (answer.envelope.aux < 0) continue;  // a server holding no shard
    fewest = fewest < 0 ? answer.envelope.aux : std::min(fewest, answer.envelope.aux);
    most = std::max(most, answer.envelope.aux);
  }
  fewest = std::max<int64_t>(fewest, 0);
  // A worker that died after its push reached every server: its batch was trained, without a result.
  int64_t reached = std::clamp<int64_t>(fewest - results, 0, not_trained_);
  not_trained_ -= reached;
  trained_unrecorded_ += reached;
  reached_some_ += std::max<int64_t>(most - std::max(fewest, results), 0);
  round_short_ = false;
}

}  // namespace ps

std::unique_ptr<StepRunner> make_coordinator(ParameterServerExtended::Chief& chief, const StepParts& parts) {
  return std::make_unique<ps::Coordinator>(chief, parts);
}

}  // namespace tandem::distribute
