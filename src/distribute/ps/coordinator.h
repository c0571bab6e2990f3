#pragma once
// The chief's step runner under ParameterServerStrategy (the class; its parts: coordinator.cpp,
// handing out steps and taking their results; coordinator_faults.cpp, tasks that die and come
// back; coordinator_record.cpp, --record and --replay): fit's batches handed to the workers, as the
// mode's dispatch policy says (dispatch.h: asynchronous, bounded staleness, synchronous rounds,
// backup workers). A step goes out as its StepInfo (wire.h): its rows' place in the round, the
// round's rows and pushes, its batch and the worker's clock.
// Where fit's batches can be read by position (tensors in memory), a step names its batch (epoch,
// step) and carries only its labels, which the worker checks against the rows it reads itself (as
// TensorFlow's workers read their own datasets); else the step carries the rows.
// Where the policy lets workers and servers die (asynchronous without a bound): a dead worker's
// steps in flight are handed to the others (at least once: its gradient may have reached the
// servers already), and a worker started again greets the chief and gets the next free step; when
// a server dies, every worker's step is called back, the server started again is greeted and
// given its shards from the chief's copy (kept at each epoch's end), and the called-back steps go
// out again. Synchronous rounds drop a worker that dies from the rounds instead.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "distribute/ps/chief.h"
#include "distribute/ps/dispatch.h"
#include "distribute/ps/moving_statistics.h"

namespace tandem::distribute::ps {

class Coordinator : public StepRunner {
 public:
  Coordinator(ParameterServerExtended::Chief& chief, const StepParts& parts);
  ~Coordinator() override;
  bool lazy_batches() const override { return by_position_; }
  void check_batch(bool, int64_t, int, int64_t) override {}

  std::optional<double> run(const GlobalBatch& batch, uint64_t) override;

  void finish_epoch() override;

  std::vector<std::pair<std::string, double>> epoch_figures() override;

 private:
  struct Batch {
    Tensor x, y;     // x undefined: the worker reads the rows by position
    Tensor weights;  // the rows' sample weights, or undefined
    int epoch = 0;
    int64_t step = 0;
  };
  struct Sent {
    int worker;
    Batch batch;                                 // handed again if its worker dies first
    int64_t key, first_row, round_rows, pushes;  // as dispatched
    Tensor loss, predictions;                    // when its result came
    Tensor moving;                               // its batch normalization statistics, if the model has any
    bool done = false, applied = false;          // applied: its push was (not dropped)
  };

  // A free worker that may start its next step, as the policy picks it, once there is one.
  int take_free_worker();

  // --replay: the worker that took this step in the recorded run, once it is free.
  int take_recorded_worker(const Batch& b);

  // --record: the servers' journals since the last epoch's end added, the whole record written.
  void write_record();

  void dispatch(int w, const Batch& b, int64_t key, int64_t first_row, int64_t round_rows, int64_t pushes);

  bool servers_may_die() const { return policy_->servers_may_die(); }
  bool workers_may_die() const { return policy_->workers_may_die(); }
  bool rounds() const { return policy_->rounds(); }
  int alive_count() const { return static_cast<int>(std::count(clocks_.alive.begin(), clocks_.alive.end(), true)); }
  // The workers the job has had: the spec's, and those added while it runs.
  int workers() const { return static_cast<int>(clocks_.alive.size()); }
  int worker_rank(int w) const { return 1 + link_.servers() + w; }
  void grow_workers(int count);

  // A worker gone: asynchronous, its steps in flight wait for another worker; synchronous, the
  // round in progress is closed without its result (its batch trained only if its push is in).
  void lose_worker(int w);
  void welcome_back(int w);  // a lost worker's control connection back, its route known

  // Its steps in flight out of flight (to hand again, or dropped), and it out of the free list.
  void orphan_steps_of(int w);

  void hand_again_what_died();

  // The control plane's news: workers lost (their steps orphaned), servers lost (restored).
  void watch_workers();

  struct LostServer {
    int server;
    std::string what;
    std::chrono::steady_clock::time_point when;
  };

  // A server died while the chief read from the servers: the others' answers dropped with their
  // connections, the server restored.
  void restore_after_lost_read();

  // Every worker's step called back; the server, started again (by the launcher or by hand),
  // greeted and given its shards from the chief's copy; then the steps go out again.
  void restore_server(const LostServer& lost);

  // Whatever came from the workers meanwhile (a restore): results, calls back answered, greetings.
  void take_messages();

  void handle(const Incoming& message);

  // A worker's greeting during training: one started again after it died joins; any other refused.
  void greet(const Incoming& hello);

  std::string waiting_for() const;

  // Until a result comes (asynchronous: into the metrics at once, its worker free again) or a
  // worker dies or joins; an Error when nothing comes within the timeout.
  void wait_for_change();

  void finish_one(const Incoming& result);

  void record(const Sent& sent);

  // Asynchronous: the statistics of the results that came, moved into the model in the steps' order
  // as far as no earlier step is still out.
  void move_pending();

  // Synchronous: the round's batches out, their results in, recorded in worker order.
  void finish_round();

  // A worker of the round died before its result: the servers apply the gradients they have (its
  // own, on a server it reached before it died, among them). `results`: the round's results that
  // came; the batches whose pushes every server had are counted trained.
  void close_round(int64_t results);

  ParameterServerExtended::Chief& chief_;
  std::unique_ptr<DispatchPolicy> policy_;
  ps::ClusterLink& link_;
  std::span<Metric> metrics_;
  Metric* loss_;
  std::vector<int> free_;  // freed last at the back
  WorkerClocks clocks_;
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
  MovingStatisticsSums moving_;                               // the model's batch normalization statistics
  std::map<int64_t, std::pair<int, Tensor>> pending_moving_;  // asynchronous, by step: worker, statistics not yet moved
  ResultCounts counts_;                                       // this epoch's
  // This epoch's steps whose results came; of them, those handed again; workers lost.
  int64_t recorded_ = 0, handed_again_ = 0, workers_lost_ = 0, not_trained_ = 0;
  // Synchronous: this epoch's batches whose worker died after its push reached every server (trained,
  // without a result), and after it reached some servers but not all.
  int64_t trained_unrecorded_ = 0, reached_some_ = 0;
  bool epoch_done_ = false;
  bool by_position_;
};

}  // namespace tandem::distribute::ps
