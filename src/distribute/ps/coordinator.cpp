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
#include <algorithm>
#include <map>

#include "distribute/ps/chief.h"
#include "tandem/error.h"

namespace tandem::distribute {
namespace {

using ps::Incoming;
using ps::MessageType;
using ps::Outgoing;

class Coordinator : public StepRunner {
 public:
  Coordinator(ParameterServerStrategy::Chief& chief, const StepParts& parts)
      : chief_(chief),
        link_(chief.link),
        metrics_(parts.metrics),
        loss_(parts.loss_metric),
        by_position_(parts.batch_at != nullptr) {
    chief_.initialize(parts.replicas[0].trainable, parts.optimizer);
    steps_ = rounds_ = parts.optimizer.iterations();  // dropout keys go on from a restored step
    for (int w = link_.workers() - 1; w >= 0; --w) free_.push_back(w);
    started_.assign(static_cast<size_t>(link_.workers()), 0);
    finished_.assign(static_cast<size_t>(link_.workers()), 0);
  }
  bool lazy_batches() const override { return by_position_; }
  void check_batch(bool, int64_t, int, int64_t) override {}

  std::optional<double> run(const GlobalBatch& batch, uint64_t) override {
    if (epoch_done_) {
      staleness_sum_ = staleness_max_ = applied_ = dropped_ = 0;
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
      int w;
      while ((w = next_free_worker()) < 0) finish_one();
      int64_t pushes = chief_.options.mode == PsMode::Asynchronous  // a round's
                           ? 1
                           : link_.workers() - chief_.options.backup_workers;
      dispatch(w, b, steps_, 0, b.y.dim(0) * pushes, pushes);
      ++steps_;
    } else {
      round_.push_back(std::move(b));
      if (static_cast<int>(round_.size()) == link_.workers()) finish_round();
    }
    return std::nullopt;
  }

  void finish_epoch() override {
    finish_round();
    while (!in_flight_.empty()) finish_one();
    chief_.pull();  // validation and checkpoints read the servers' variables
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
    Tensor labels;
    Tensor loss, predictions;  // when its result came
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
      int64_t slowest = *std::min_element(finished_.begin(), finished_.end());
      if (started_[static_cast<size_t>(*pick)] - slowest > bound) return -1;
    }
    int w = *pick;
    free_.erase(pick);
    return w;
  }

  void dispatch(int w, const Batch& b, int64_t key, int64_t first_row, int64_t round_rows, int64_t pushes) {
    int64_t id = next_id_++;
    Outgoing step(MessageType::Step, 0, id, key);
    int64_t clock = started_[static_cast<size_t>(w)]++;
    if (chief_.options.mode == PsMode::Asynchronous)
      ++chief_.steps_ahead[clock - *std::min_element(finished_.begin(), finished_.end())];
    step.add(
        0, 0,
        Tensor::from_vector({6}, std::vector<int32_t>{static_cast<int32_t>(first_row), static_cast<int32_t>(round_rows),
                                                      static_cast<int32_t>(pushes), b.epoch,
                                                      static_cast<int32_t>(b.step), static_cast<int32_t>(clock)}));
    step.add(0, 1, b.y);
    if (b.x.defined()) step.add(0, 2, b.x);
    step.send(link_.own_socket(), &link_.worker_route(w));
    in_flight_[id] = Sent{w, b.y, Tensor(), Tensor(), false};
  }

  std::string waiting_for() const {
    std::string who;
    for (const auto& [id, sent] : in_flight_)
      if (!sent.done) who += (who.empty() ? "" : ", ") + link_.describe({"worker", sent.worker});
    return who;
  }

  // The next result in; asynchronous: into the metrics at once, its worker free again.
  void finish_one() {
    Incoming result = link_.await(link_.own_socket(), true, waiting_for());
    auto it = in_flight_.find(result.envelope.step);
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
      if (static_cast<int>(in_round_.size()) == link_.workers() - chief_.options.backup_workers) {
        free_.insert(free_.end(), in_round_.rbegin(), in_round_.rend());
        in_round_.clear();
      }
    }
  }

  void record(const Sent& sent) {
    int64_t rows = sent.labels.dim(0);
    if (loss_ != nullptr) loss_->update_mean(static_cast<double>(sent.loss.item()) / static_cast<double>(rows), rows);
    for (Metric& m : metrics_) m.update(sent.labels, sent.predictions);
  }

  // Synchronous: the round's batches out, their results in, recorded in worker order.
  void finish_round() {
    if (round_.empty()) return;
    int64_t rows = 0, first = 0;
    for (const Batch& b : round_) rows += b.y.dim(0);
    auto pushes = static_cast<int64_t>(round_.size());
    for (size_t w = 0; w < round_.size(); ++w) {
      dispatch(static_cast<int>(w), round_[w], rounds_, first, rows, pushes);
      first += round_[w].y.dim(0);
    }
    for (int64_t i = 0; i < pushes; ++i) finish_one();
    for (auto& [id, sent] : in_flight_) record(sent);
    in_flight_.clear();
    round_.clear();
    ++rounds_;
  }

  ParameterServerStrategy::Chief& chief_;
  ps::ClusterLink& link_;
  std::span<Metric> metrics_;
  Metric* loss_;
  std::vector<int> free_;
  std::vector<int> in_round_;                // backup workers: whose gradients the round in progress holds
  std::vector<int64_t> started_, finished_;  // each worker's steps handed out and finished (its clock)
  std::map<int64_t, Sent> in_flight_;
  std::vector<Batch> round_;
  int64_t next_id_ = 0, steps_ = 0, rounds_ = 0;
  int64_t staleness_sum_ = 0, staleness_max_ = 0, applied_ = 0, dropped_ = 0;
  bool epoch_done_ = false;
  bool by_position_;
};

}  // namespace

std::unique_ptr<StepRunner> make_coordinator(ParameterServerStrategy::Chief& chief, const StepParts& parts) {
  return std::make_unique<Coordinator>(chief, parts);
}

}  // namespace tandem::distribute
