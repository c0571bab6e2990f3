// The chief's step runner under ParameterServerStrategy: fit's batches handed to the workers.
// Asynchronous: each batch to the next free worker, at once; with a staleness bound S, to a free
// worker at most S steps ahead of the slowest (else the batch waits for results). Synchronous with
// B backup workers: as asynchronous, each step a share of a round of W - B pushes, which the servers
// apply without waiting for the rest (dropped, counted). Synchronous: a round of one batch
// per worker, each told the round's rows (its share of the round's mean) and size (the pushes a
// server sums before its update); the next round starts when every result of this one is in.
// Where fit's batches can be read by position (tensors in memory), a step names its batch (epoch,
// step) and carries only its labels, which the worker checks against the rows it reads itself (as
// TensorFlow's workers read their own datasets); else the step carries the rows.
// Asynchronous without a bound, workers and servers may die and come back: a dead worker's steps
// in flight are handed to the others (at least once: its gradient may have reached the servers
// already), and a worker started again greets the chief and gets the next free step; when a
// server dies, every worker's step is called back, the server started again is greeted and given
// its shards from the chief's copy (kept at each epoch's end), and the called-back steps go out again.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <set>

#include "distribute/ps/chief.h"
#include "tandem/error.h"

namespace tandem::distribute {
namespace {

using ps::Incoming;
using ps::MessageType;
using ps::Outgoing;

constexpr int64_t kMaxWorkers = 4096;  // as `tandem launch --workers` allows

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

class Coordinator : public StepRunner {
 public:
  Coordinator(ParameterServerStrategy::Chief& chief, const StepParts& parts)
      : chief_(chief),
        link_(chief.link),
        metrics_(parts.metrics),
        loss_(parts.loss_metric),
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
    for (int w = link_.workers() - 1; w >= 0; --w) free_.push_back(w);
    started_.assign(static_cast<size_t>(link_.workers()), 0);
    finished_.assign(static_cast<size_t>(link_.workers()), 0);
    alive_.assign(static_cast<size_t>(link_.workers()), true);
    if (servers_may_die()) {
      link_.set_wait_hook([this] {
        for (int s = 0; s < link_.servers(); ++s)
          if (s != restoring_server_ && link_.control().lost(1 + s)) throw ps::ServerLost(link_.describe({"ps", s}));
      });
      chief_.restore_lost = [this] { restore_after_lost_read(); };
    }
  }
  ~Coordinator() override {
    link_.set_wait_hook(nullptr);
    chief_.restore_lost = nullptr;
    if (copy_epoch_ > 0 && servers_may_die())
      std::fprintf(stderr,
                   "chief: keeping its copy of the servers' state (what a restore starts from) took %.1f ms per "
                   "epoch\n",
                   copy_seconds_ * 1e3 / copy_epoch_);
  }
  bool lazy_batches() const override { return by_position_; }
  void check_batch(bool, int64_t, int, int64_t) override {}

  std::optional<double> run(const GlobalBatch& batch, uint64_t) override {
    if (epoch_done_) {
      staleness_sum_ = staleness_max_ = applied_ = dropped_ = recorded_ = handed_again_ = workers_lost_ = 0;
      not_trained_ = 0;
      epoch_done_ = false;
    }
    Batch b{Tensor(), Tensor(), batch.epoch, batch.step};
    if (batch.x.defined()) {
      b.x = batch.x.clone();  // the batch source may reuse its tensors
      b.y = batch.y.clone();
    } else {
      batch.gather(0, batch.rows, nullptr, b.y);  // the worker reads the rows
    }
    if (streaming()) {  // asynchronous, or synchronous with backup workers: each free worker steps
      hand_again_what_died();
      int64_t pushes = chief_.options.mode == PsMode::Asynchronous  // a round's
                           ? 1
                           : workers() - chief_.options.backup_workers;
      dispatch(chief_.replay ? take_recorded_worker(b) : take_free_worker(), b, steps_, 0, b.y.dim(0) * pushes, pushes);
      ++steps_;
    } else {
      round_.push_back(std::move(b));
      if (static_cast<int>(round_.size()) >= alive_count()) finish_round();
    }
    return std::nullopt;
  }

  void finish_epoch() override {
    finish_round();
    while (!in_flight_.empty() || !orphans_.empty()) {
      hand_again_what_died();
      if (!in_flight_.empty()) wait_for_change();
    }
    if (workers_lost_ > 0 && rounds())
      std::fprintf(stderr, "chief: this epoch's batches: %lld trained, %lld not (their worker died)\n",
                   static_cast<long long>(recorded_), static_cast<long long>(not_trained_));
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

  std::vector<std::pair<std::string, double>> epoch_figures() override {
    if (chief_.options.backup_workers > 0) return {{"dropped", static_cast<double>(dropped_)}};
    if (chief_.options.mode != PsMode::Asynchronous) return {};
    double mean = applied_ > 0 ? static_cast<double>(staleness_sum_) / static_cast<double>(applied_) : 0.0;
    return {{"staleness", mean}, {"max_staleness", static_cast<double>(staleness_max_)}};
  }

 private:
  struct Batch {
    Tensor x, y;  // x undefined: the worker reads the rows by position
    int epoch = 0;
    int64_t step = 0;
  };
  struct Sent {
    int worker;
    Batch batch;                                 // handed again if its worker dies first
    int64_t key, first_row, round_rows, pushes;  // as dispatched
    Tensor loss, predictions;                    // when its result came
    bool done = false;
  };

  bool streaming() const { return chief_.options.mode == PsMode::Asynchronous || chief_.options.backup_workers > 0; }

  // A free worker that may start its next step (taken from the free list), or -1. Without a
  // staleness bound, the one freed last; with bound S, the free worker furthest behind, if it is
  // at most S steps ahead of the slowest worker's finished steps.
  int next_free_worker() {
    if (free_.empty()) return -1;
    auto pick = std::prev(free_.end());
    if (int64_t bound = chief_.options.max_staleness; bound >= 0) {
      pick = std::min_element(free_.begin(), free_.end(), [&](int a, int b) {
        return started_[static_cast<size_t>(a)] < started_[static_cast<size_t>(b)];
      });
      if (started_[static_cast<size_t>(*pick)] - slowest() > bound) return -1;
    }
    int w = *pick;
    free_.erase(pick);
    return w;
  }

  int take_free_worker() {
    int w;
    while ((w = next_free_worker()) < 0) wait_for_change();
    return w;
  }

  // --replay: the worker that took this step in the recorded run, once it is free.
  int take_recorded_worker(const Batch& b) {
    const auto& steps = chief_.replay->steps;
    if (replayed_ >= steps.size())
      fail(
          "ParameterServerStrategy: --replay {}: the record has {} steps and this run goes on past them (more epochs "
          "or data than the recorded run?)",
          chief_.options.replay, steps.size());
    auto [w, epoch, step] = steps[replayed_];
    if (epoch != b.epoch || step != b.step)
      fail(
          "ParameterServerStrategy: --replay {}: step {} of the record is batch {} of epoch {}; this run's is batch "
          "{} of epoch {} (another program, data or batch size than the recorded run's?)",
          chief_.options.replay, replayed_, step, epoch + 1, b.step, b.epoch + 1);
    while (std::find(free_.begin(), free_.end(), w) == free_.end()) wait_for_change();
    std::erase(free_, w);
    ++replayed_;
    return w;
  }

  // --record: the servers' journals since the last epoch's end added, the whole record written.
  void write_record() {
    auto& sockets = link_.server_sockets();
    for (int s = 0; s < link_.servers(); ++s) {
      Outgoing(MessageType::Journal, 0).send(sockets[static_cast<size_t>(s)]);
      Incoming answer = link_.await(sockets[static_cast<size_t>(s)], false, link_.describe({"ps", s}));
      if (answer.envelope.type != MessageType::Journal || answer.items.size() != 1 ||
          answer.items[0].header.dtype != DType::Int32 || answer.items[0].header.shape.rank() != 2 ||
          answer.items[0].header.shape[1] != 4)
        fail("ParameterServerStrategy: {} did not give its journal (--record)", link_.describe({"ps", s}));
      Tensor events = answer.items[0].tensor();
      const int32_t* e = events.data<int32_t>();
      for (int64_t i = 0; i < events.dim(0); ++i)
        chief_.record.applied[static_cast<size_t>(s)].push_back({e[4 * i], e[4 * i + 1], e[4 * i + 2], e[4 * i + 3]});
    }
    if (workers_lost_ > 0) chief_.record.complete = false;
    ps::write_record(chief_.options.record, chief_.record);
  }

  // The finished steps of the slowest worker alive.
  int64_t slowest() const {
    int64_t least = -1;
    for (size_t w = 0; w < finished_.size(); ++w)
      if (alive_[w] && (least < 0 || finished_[w] < least)) least = finished_[w];
    return std::max<int64_t>(least, 0);
  }

  void dispatch(int w, const Batch& b, int64_t key, int64_t first_row, int64_t round_rows, int64_t pushes) {
    int64_t id = next_id_++;
    Outgoing step(MessageType::Step, 0, id, key);
    int64_t clock = started_[static_cast<size_t>(w)]++;
    if (chief_.options.mode == PsMode::Asynchronous) ++chief_.steps_ahead[clock - slowest()];
    step.add(
        0, 0,
        Tensor::from_vector({6}, std::vector<int32_t>{static_cast<int32_t>(first_row), static_cast<int32_t>(round_rows),
                                                      static_cast<int32_t>(pushes), b.epoch,
                                                      static_cast<int32_t>(b.step), static_cast<int32_t>(clock)}));
    step.add(0, 1, b.y);
    if (b.x.defined()) step.add(0, 2, b.x);
    in_flight_[id] = Sent{w, b, key, first_row, round_rows, pushes, Tensor(), Tensor(), false};
    if (!chief_.options.record.empty()) chief_.record.steps.push_back({w, b.epoch, static_cast<int32_t>(b.step)});
    try {
      step.send(link_.own_socket(), &link_.worker_route(w));
    } catch (const std::exception&) {  // the worker is gone; its control connection will say so
      if (!workers_may_die()) throw;
      lose_worker(w);
    }
  }

  // Asynchronous without a bound (not a replay): a worker may die and another take its steps, a
  // server may die and be restored. Synchronous without backup workers: a worker may die and be
  // dropped from its round.
  bool servers_may_die() const {
    return chief_.options.mode == PsMode::Asynchronous && chief_.options.max_staleness < 0 &&
           chief_.options.replay.empty();
  }
  bool workers_may_die() const { return servers_may_die() || rounds(); }
  bool rounds() const { return chief_.options.mode == PsMode::Synchronous && chief_.options.backup_workers == 0; }
  int alive_count() const { return static_cast<int>(std::count(alive_.begin(), alive_.end(), true)); }
  // The workers the job has had: the spec's, and those added while it runs.
  int workers() const { return static_cast<int>(alive_.size()); }
  int worker_rank(int w) const { return 1 + link_.servers() + w; }
  void grow_workers(int count) {
    alive_.resize(static_cast<size_t>(count), false);
    started_.resize(static_cast<size_t>(count), 0);
    finished_.resize(static_cast<size_t>(count), 0);
  }

  // A worker gone: asynchronous, its steps in flight wait for another worker; synchronous, its
  // batch of the round in progress is not trained, and the round is closed without it.
  void lose_worker(int w) {
    size_t before = orphans_.size();
    alive_[static_cast<size_t>(w)] = false;
    called_back_.erase(w);
    orphan_steps_of(w);
    if (rounds()) {
      size_t dropped = orphans_.size() - before;
      round_short_ = round_short_ || dropped > 0;
      not_trained_ += static_cast<int64_t>(dropped);
      orphans_.clear();
    }
  }

  // Its steps in flight out of flight (to hand again, or dropped), and it out of the free list.
  void orphan_steps_of(int w) {
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (it->second.worker == w && !it->second.done) {
        orphans_.push_back(std::move(it->second));
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
    started_[static_cast<size_t>(w)] = finished_[static_cast<size_t>(w)];
    std::erase(free_, w);
  }

  void hand_again_what_died() {
    while (!orphans_.empty()) {
      int w = take_free_worker();
      Sent s = std::move(orphans_.front());
      orphans_.pop_front();
      ++handed_again_;
      dispatch(w, s.batch, s.key, s.first_row, s.round_rows, s.pushes);
    }
  }

  // The control plane's news: workers lost (their steps orphaned), servers lost (restored).
  void watch_workers() {
    for (const auto& event : link_.control().take_events()) {
      if (event.joined || event.rank < 1) continue;
      if (event.rank <= link_.servers()) {
        lost_servers_.push_back({event.rank - 1, event.what, std::chrono::steady_clock::now()});
        continue;
      }
      int w = event.rank - 1 - link_.servers();
      if (w >= workers()) continue;
      size_t before = orphans_.size();
      ++workers_lost_;
      lose_worker(w);
      if (rounds()) {
        std::fprintf(stderr, "chief: %s; %s the rounds go on with %d worker(s)\n", event.what.c_str(),
                     round_short_ ? "its batch of the round in progress is not trained, and" : "", alive_count());
        if (alive_count() < chief_.options.min_workers)
          fail("ParameterServerStrategy: {} worker(s) left, fewer than --min-workers {}: the job ends", alive_count(),
               chief_.options.min_workers);
        continue;
      }
      std::fprintf(stderr, "chief: %s; its %zu step(s) in flight go to another worker\n", event.what.c_str(),
                   orphans_.size() - before);
    }
    while (!restoring_ && !lost_servers_.empty()) {
      LostServer lost = lost_servers_.front();
      lost_servers_.pop_front();
      restore_server(lost);
    }
  }

  struct LostServer {
    int server;
    std::string what;
    std::chrono::steady_clock::time_point when;
  };

  // A server died while the chief read from the servers: the others' answers dropped with their
  // connections, the server restored.
  void restore_after_lost_read() {
    chief_.record.complete = false;
    for (int s = 0; s < link_.servers(); ++s) link_.reconnect_server(s);
    watch_workers();
  }

  // Every worker's step called back; the server, started again (by the launcher or by hand),
  // greeted and given its shards from the chief's copy; then the steps go out again.
  void restore_server(const LostServer& lost) {
    restoring_ = true;
    chief_.record.complete = false;
    restoring_server_ = lost.server;
    std::string name = link_.describe({"ps", lost.server});
    std::fprintf(stderr, "chief: %s; every step in flight is called back until it is started again and restored\n",
                 lost.what.c_str());
    size_t orphans = orphans_.size();
    for (int w = 0; w < workers(); ++w) {
      if (!alive_[static_cast<size_t>(w)]) continue;
      orphan_steps_of(w);  // and out of the free list until it answers
      try {
        Outgoing(MessageType::Abort, 0).send(link_.own_socket(), &link_.worker_route(w));
        called_back_.insert(w);
      } catch (const std::exception&) {  // gone: its control connection will say so
      }
    }
    size_t called = orphans_.size() - orphans;
    if (!link_.greet_server_again(lost.server, [&] { take_messages(); }))
      fail(
          "ParameterServerStrategy: {} was not started again within {} s (tandem launch starts a dead server again, "
          "--restarts; or start its task by hand)",
          name, link_.timeout().count() / 1000.0);
    chief_.init_server(lost.server, finished_);
    auto deadline = std::chrono::steady_clock::now() + link_.timeout();
    while (!called_back_.empty()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::string who;
        for (int w : called_back_) who += (who.empty() ? "" : ", ") + link_.describe({"worker", w});
        fail("ParameterServerStrategy: {} did not give back its step within {} s", who,
             link_.timeout().count() / 1000.0);
      }
      take_messages();
    }
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - lost.when;
    std::fprintf(stderr,
                 "chief: %s restored %.2f s after its death was seen, from the chief's copy of %s; lost on its "
                 "shards: the updates of the %lld steps trained since; the %zu steps called back are trained again\n",
                 name.c_str(), took.count(),
                 copy_epoch_ == 0 ? "this fit's start" : fmt::format("epoch {}'s end", copy_epoch_).c_str(),
                 static_cast<long long>(recorded_), called);
    restoring_ = false;
    restoring_server_ = -1;
  }

  // Whatever came from the workers meanwhile (a restore): results, calls back answered, greetings.
  void take_messages() {
    watch_workers();
    for (auto wait = std::chrono::milliseconds(20);; wait = std::chrono::milliseconds(0)) {
      std::optional<Incoming> message = ps::receive(link_.own_socket(), wait, true);
      if (!message) return;
      handle(*message);
    }
  }

  void handle(const Incoming& message) {
    if (message.envelope.type == MessageType::Ready) return greet(message);
    if (message.envelope.type == MessageType::Aborted) {
      auto w = static_cast<int>(message.envelope.variable);
      if (called_back_.erase(w) > 0 && alive_[static_cast<size_t>(w)]) free_.push_back(w);
      return;
    }
    finish_one(message);
  }

  // A worker's greeting during training: one started again after it died joins; any other refused.
  void greet(const Incoming& hello) {
    auto w = static_cast<int64_t>(hello.envelope.variable);
    std::string refusal;
    if (!workers_may_die())
      refusal =
          "workers join a running job only in the asynchronous mode without a staleness bound and in the synchronous "
          "one without backup workers";
    else if (w >= link_.workers() && !servers_may_die())
      refusal = fmt::format(
          "the cluster has {} workers, so no worker {}: a worker joins beyond the cluster the job started with only "
          "in the asynchronous mode without a staleness bound",
          link_.workers(), w);
    else if (w >= kMaxWorkers)
      refusal = fmt::format("worker {} is past the most workers a job takes ({})", w, kMaxWorkers);
    else if (w < workers() &&
             (alive_[static_cast<size_t>(w)] || !link_.control().lost(worker_rank(static_cast<int>(w)))))
      refusal = fmt::format("{} is already running", link_.describe({"worker", static_cast<int>(w)}));
    if (!refusal.empty()) {
      Outgoing no(MessageType::Refused, 0);
      no.add_text(refusal);
      try {
        no.send(link_.own_socket(), &hello.route);
      } catch (const std::exception&) {  // it went away
      }
      return;
    }
    if (w >= workers()) grow_workers(static_cast<int>(w) + 1);  // a worker added to the running job
    link_.welcome_worker(static_cast<int>(w), hello.route);
    alive_[static_cast<size_t>(w)] = true;
    free_.push_back(static_cast<int>(w));
    std::fprintf(stderr, "chief: %s joined the running job; it gets the next step\n",
                 link_.describe({"worker", static_cast<int>(w)}).c_str());
  }

  std::string waiting_for() const {
    std::string who;
    for (const auto& [id, sent] : in_flight_)
      if (!sent.done) who += (who.empty() ? "" : ", ") + link_.describe({"worker", sent.worker});
    return who;
  }

  // Until a result comes (asynchronous: into the metrics at once, its worker free again) or a
  // worker dies or joins; an Error when nothing comes within the timeout.
  void wait_for_change() {
    auto deadline = std::chrono::steady_clock::now() + link_.timeout();
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
        fail("ParameterServerStrategy: {} did not answer within {} s", waiting_for(), link_.timeout().count() / 1000.0);
      }
      message = ps::receive(link_.own_socket(), std::min(left, std::chrono::milliseconds(50)), true);
    }
    handle(*message);
  }

  void finish_one(const Incoming& result) {
    auto it = in_flight_.find(result.envelope.step);
    if (result.envelope.type == MessageType::Result && (it == in_flight_.end() || it->second.done) && workers_may_die())
      return;  // from a worker taken for dead, whose steps went to others
    if (result.envelope.type != MessageType::Result || it == in_flight_.end() || it->second.done ||
        result.items.size() != 2)
      fail("ParameterServerStrategy: the chief got a {} message for step {} from worker {}",
           message_type_name(result.envelope.type), result.envelope.step, result.envelope.variable);
    Sent& sent = it->second;
    sent.loss = result.items[0].tensor();
    sent.predictions = result.items[1].tensor();
    sent.done = true;
    ++finished_[static_cast<size_t>(sent.worker)];
    if (result.envelope.aux < 0) {
      ++dropped_;
    } else {
      staleness_sum_ += result.envelope.aux;
      staleness_max_ = std::max(staleness_max_, result.envelope.aux);
      ++applied_;
    }
    if (streaming()) {
      record(sent);
      int w = sent.worker;
      in_flight_.erase(it);
      if (chief_.options.backup_workers == 0 || result.envelope.aux < 0) {
        free_.push_back(w);  // a dropped gradient's worker goes on at once, with the round in progress
        return;
      }
      // Backup workers, as SyncReplicasOptimizer's tokens: a worker whose gradient is in the round
      // waits for the round to be applied (its W - B gradients in), then all start the next.
      in_round_.push_back(w);
      if (static_cast<int>(in_round_.size()) == workers() - chief_.options.backup_workers) {
        free_.insert(free_.end(), in_round_.rbegin(), in_round_.rend());
        in_round_.clear();
      }
    }
  }

  void record(const Sent& sent) {
    int64_t rows = sent.batch.y.dim(0);
    if (loss_ != nullptr) loss_->update_mean(static_cast<double>(sent.loss.item()) / static_cast<double>(rows), rows);
    for (Metric& m : metrics_) m.update(sent.batch.y, sent.predictions);
    ++recorded_;
  }

  // Synchronous: the round's batches out, their results in, recorded in worker order.
  void finish_round() {
    if (round_.empty()) return;
    int64_t rows = 0, first = 0;
    for (const Batch& b : round_) rows += b.y.dim(0);
    auto pushes = static_cast<int64_t>(round_.size());
    std::vector<int> workers;  // those alive, in order (a worker that died is out of the rounds)
    for (int w = 0; w < this->workers(); ++w)
      if (alive_[static_cast<size_t>(w)]) workers.push_back(w);
    for (size_t i = 0; i < round_.size(); ++i) {
      dispatch(workers[i], round_[i], rounds_, first, rows, pushes);
      first += round_[i].y.dim(0);
    }
    while (std::any_of(in_flight_.begin(), in_flight_.end(), [](const auto& sent) { return !sent.second.done; }))
      wait_for_change();
    if (round_short_) close_round();
    for (auto& [id, sent] : in_flight_) record(sent);
    in_flight_.clear();
    round_.clear();
    ++rounds_;
  }

  // A worker of the round died before its result: the servers apply the gradients they have (its
  // own, on a server it reached before it died, among them).
  void close_round() {
    auto& sockets = link_.server_sockets();
    for (auto& socket : sockets) Outgoing(MessageType::CloseRound, 0).send(socket);
    for (int s = 0; s < link_.servers(); ++s) {
      Incoming answer = link_.await(sockets[static_cast<size_t>(s)], false, link_.describe({"ps", s}));
      if (answer.envelope.type != MessageType::Ready)
        fail("ParameterServerStrategy: {} did not close the round: {}", link_.describe({"ps", s}),
             answer.items.empty() ? "" : std::string(answer.items[0].payload));
    }
    round_short_ = false;
  }

  ParameterServerStrategy::Chief& chief_;
  ps::ClusterLink& link_;
  std::span<Metric> metrics_;
  Metric* loss_;
  std::vector<int> free_;
  std::vector<int> in_round_;                // backup workers: whose gradients the round in progress holds
  std::vector<int64_t> started_, finished_;  // each worker's steps handed out and finished (its clock)
  std::vector<bool> alive_;                  // false: died (expendable), not back
  std::map<int64_t, Sent> in_flight_;
  std::deque<Sent> orphans_;  // steps whose worker died (or were called back) before their result came
  std::deque<LostServer> lost_servers_;
  std::set<int> called_back_;  // workers whose step was called back, until they answer
  bool restoring_ = false;
  bool round_short_ = false;  // synchronous: a worker of the round in progress died
  size_t replayed_ = 0;       // --replay: steps handed out
  int restoring_server_ = -1;
  int copy_epoch_ = 0;       // the chief's copy of the servers' state is of this epoch's end (0: this fit's start)
  double copy_seconds_ = 0;  // taking it, over the epochs
  std::vector<Batch> round_;
  int64_t next_id_ = 0, steps_ = 0, rounds_ = 0;
  int64_t staleness_sum_ = 0, staleness_max_ = 0, applied_ = 0, dropped_ = 0;
  // This epoch's steps whose results came; of them, those handed again; workers lost.
  int64_t recorded_ = 0, handed_again_ = 0, workers_lost_ = 0, not_trained_ = 0;
  bool epoch_done_ = false;
  bool by_position_;
};

}  // namespace

std::unique_ptr<StepRunner> make_coordinator(ParameterServerStrategy::Chief& chief, const StepParts& parts) {
  return std::make_unique<Coordinator>(chief, parts);
}

}  // namespace tandem::distribute
