// The parameter servers' policies on their own: the chief's dispatch policy per mode (which free
// worker steps next, who is freed when a result comes, what the epoch reports) and a server's
// update policy per mode (when a push updates the shards, with which optimizer state). Whole
// clusters running them are ps_cluster_test.cpp's and ps_faults_test.cpp's.
#include <gtest/gtest.h>

#include "distribute/ps/dispatch.h"
#include "distribute/ps/updates.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using namespace distribute::ps;
using distribute::ParameterServerOptions;
using distribute::PsMode;

ParameterServerOptions options(PsMode mode, int64_t bound = -1, int backups = 0, std::string replay = "") {
  ParameterServerOptions o;
  o.mode = mode;
  o.max_staleness = bound;
  o.backup_workers = backups;
  o.replay = std::move(replay);
  return o;
}

WorkerClocks clocks(std::vector<int64_t> started, std::vector<int64_t> finished) {
  std::vector<bool> alive(started.size(), true);
  return {std::move(started), std::move(finished), std::move(alive)};
}

TEST(PsDispatch, AsynchronousHandsEachBatchToTheWorkerFreedLastAndSurvivesDeaths) {
  auto policy = make_dispatch_policy(options(PsMode::Asynchronous));
  std::vector<int> free{2, 0, 1};
  EXPECT_FALSE(policy->rounds());
  EXPECT_EQ(policy->pushes(3), 1);
  EXPECT_EQ(policy->take(free, clocks({0, 9, 0}, {0, 0, 0})), 1);  // no bound: however far ahead
  EXPECT_EQ(free, (std::vector<int>{2, 0}));
  policy->finished(1, false, 3, free);
  EXPECT_EQ(free, (std::vector<int>{2, 0, 1}));
  EXPECT_TRUE(policy->servers_may_die() && policy->workers_may_die() && policy->counts_lead());
  EXPECT_FALSE(make_dispatch_policy(options(PsMode::Asynchronous, -1, 0, "run.json"))->servers_may_die())
      << "a replay forces the recorded order: no task may die";
  auto figures = policy->figures({.staleness_sum = 6, .staleness_max = 3, .applied = 4});
  ASSERT_EQ(figures.size(), 2u);
  EXPECT_EQ(figures[0], (std::pair<std::string, double>{"staleness", 1.5}));
  EXPECT_EQ(figures[1], (std::pair<std::string, double>{"max_staleness", 3.0}));
}

TEST(PsDispatch, BoundedStalenessPicksTheWorkerFurthestBehindWithinTheBound) {
  auto policy = make_dispatch_policy(options(PsMode::Asynchronous, 1));
  std::vector<int> free{1, 0};
  // Worker 1 has started fewer steps: it goes first, though worker 0 was freed last.
  EXPECT_EQ(policy->take(free, clocks({3, 1, 1}, {2, 1, 1})), 1);
  // Worker 0 has started 3, the slowest has finished 1: 2 ahead, over the bound of 1.
  EXPECT_EQ(policy->take(free, clocks({3, 2, 1}, {2, 1, 1})), -1);
  EXPECT_EQ(free, (std::vector<int>{0}));
  // The slowest finishes a step: 1 ahead, within the bound.
  EXPECT_EQ(policy->take(free, clocks({3, 2, 2}, {2, 2, 2})), 0);
  EXPECT_FALSE(policy->servers_may_die() || policy->workers_may_die());
  EXPECT_TRUE(policy->counts_lead());
}

TEST(PsDispatch, SynchronousRoundsGatherBatchesAndDropAWorkerThatDies) {
  auto policy = make_dispatch_policy(options(PsMode::Synchronous));
  EXPECT_TRUE(policy->rounds());
  EXPECT_TRUE(policy->workers_may_die());
  EXPECT_FALSE(policy->servers_may_die() || policy->counts_lead());
  EXPECT_TRUE(policy->figures({.staleness_sum = 1, .applied = 1}).empty());
}

TEST(PsDispatch, BackupWorkersHoldTheRoundsWorkersUntilItCloses) {
  auto policy = make_dispatch_policy(options(PsMode::Synchronous, -1, 1));
  EXPECT_FALSE(policy->rounds());
  EXPECT_EQ(policy->pushes(3), 2);  // a round of W - B pushes
  std::vector<int> free;
  policy->finished(2, false, 3, free);
  EXPECT_TRUE(free.empty()) << "a worker whose push is in the round waits for the round";
  policy->finished(0, true, 3, free);
  EXPECT_EQ(free, (std::vector<int>{0})) << "a dropped push's worker goes on at once";
  policy->finished(1, false, 3, free);
  EXPECT_EQ(free, (std::vector<int>{0, 1, 2}));  // the round closed: both of its workers freed
  auto figures = policy->figures({.dropped = 4});
  ASSERT_EQ(figures.size(), 1u);
  EXPECT_EQ(figures[0], (std::pair<std::string, double>{"dropped", 4.0}));
}

// A server's shards as the update policies see them: one variable of two floats, updated by the
// optimizer given (SGD, learning rate 1: the value minus the gradient), the version counted.
struct Shards {
  Variable v{.name = "v", .value = Tensor::from_vector({2}, std::vector<float>{10, 20})};
  std::vector<Variable*> variables{&v};
  std::unique_ptr<Optimizer> optimizer = std::make_unique<optimizers::SGD>(1.0f);
  int64_t version = 0;
  std::vector<const Optimizer*> applied_by;
  UpdatePolicy::Apply apply = [this](Optimizer& o, std::vector<Tensor>& gradients) {
    o.apply_here(variables, gradients);
    applied_by.push_back(&o);
    ++version;
  };
  Shards() { optimizer->build(variables); }
  Push push(uint32_t worker, PushInfo info, int64_t computed_on, std::vector<float> g) {
    return {worker, info, computed_on, version, {Tensor::from_vector({2}, std::move(g))}};
  }
  // A push of a synchronous round of `pushes` (unnumbered, as with backup workers), and one of the
  // worker's clock.
  Push round_push(uint32_t worker, int64_t pushes, int64_t computed_on, std::vector<float> g) {
    return push(worker, {.round_pushes = pushes}, computed_on, std::move(g));
  }
  Push clock_push(uint32_t worker, int64_t clock, int64_t computed_on, std::vector<float> g) {
    return push(worker, {.clock = clock}, computed_on, std::move(g));
  }
};

TEST(PsUpdates, SynchronousSumsARoundInWorkerOrderAndDropsALatePush) {
  Shards s;
  auto policy = make_update_policy({.kind = PsPolicy::Kind::Synchronous}, *s.optimizer, s.variables, 3, {}, s.apply);
  EXPECT_FALSE(policy->journals());
  EXPECT_EQ(policy->push(s.round_push(2, 2, 0, {1, 2})), 0);
  EXPECT_EQ(s.version, 0) << "a round of 2 waits for its second push";
  EXPECT_EQ(policy->push(s.round_push(0, 2, 0, {3, 4})), 0);
  EXPECT_EQ(s.version, 1);
  EXPECT_EQ(s.v.value.to_vector(), (std::vector<float>{6, 14}));
  EXPECT_EQ(policy->push(s.round_push(1, 2, 0, {100, 100})), -1)
      << "computed on version 0, the round applied without it";
  EXPECT_EQ(policy->dropped(), 1);
  EXPECT_EQ(s.v.value.to_vector(), (std::vector<float>{6, 14}));
  EXPECT_NE(error_of([&] {
              policy->push(s.round_push(0, 4, 1, {0, 0}));
            }).find("a round of 4 pushes from 3 workers"),
            std::string::npos);
  EXPECT_EQ(policy->push(s.round_push(1, 2, 1, {1, 1})), 0);
  EXPECT_EQ(policy->close_round(-1), 1);  // a worker of the round died: applied with the one push it has
  EXPECT_EQ(s.version, 2);
  EXPECT_EQ(s.v.value.to_vector(), (std::vector<float>{5, 13}));
  EXPECT_EQ(&policy->saved(), s.optimizer.get());
}

// Numbered rounds (no backup workers): a worker dropped from round 7 (stopped past the timeout)
// that goes on, pulls the newest version and pushes for round 7 after the chief closed it, is
// dropped; the rounds of the workers left go on. Without the round's number its push would start a
// round of 2 that nobody completes, and the next round's push would be refused.
TEST(PsUpdates, SynchronousDropsAPushForARoundAlreadyClosed) {
  Shards s;
  auto policy = make_update_policy({.kind = PsPolicy::Kind::Synchronous}, *s.optimizer, s.variables, 2, {}, s.apply);
  auto push = [&](uint32_t worker, int64_t pushes, int64_t round, std::vector<float> g) {
    Push p = s.round_push(worker, pushes, s.version, std::move(g));  // computed on the newest version
    p.info.round = round;
    return policy->push(std::move(p));
  };
  EXPECT_EQ(push(0, 2, 7, {1, 1}), 0);
  EXPECT_EQ(policy->close_round(7), 1) << "worker 1 dropped: round 7 applied with worker 0's push";
  EXPECT_EQ(s.version, 1);
  EXPECT_EQ(push(0, 1, 8, {1, 1}), 0);
  EXPECT_EQ(s.version, 2) << "a round of 1 is applied at once";
  EXPECT_EQ(push(1, 2, 7, {100, 100}), -1) << "worker 1 went on after round 7 was closed";
  EXPECT_EQ(policy->dropped(), 1);
  EXPECT_EQ(s.version, 2);
  EXPECT_EQ(push(0, 1, 9, {1, 1}), 0) << "no round was left in progress";
  EXPECT_EQ(s.version, 3);
  EXPECT_EQ(s.v.value.to_vector(), (std::vector<float>{7, 17}));
  // A round complete before its close came: the close says how many pushes it had.
  EXPECT_EQ(push(0, 2, 10, {0, 0}), 0);
  EXPECT_EQ(push(1, 2, 10, {0, 0}), 0);
  EXPECT_EQ(policy->close_round(10), 2);
  EXPECT_EQ(policy->close_round(11), 0) << "no push of round 11 came";
  EXPECT_EQ(push(1, 2, 11, {5, 5}), -1) << "round 11 was closed before its push";
  EXPECT_NE(error_of([&] {
              push(0, 2, 12, {0, 0});
              push(1, 2, 13, {0, 0});
            }).find("for round 13, the round in progress is 12"),
            std::string::npos);
  EXPECT_NE(error_of([&] { policy->close_round(13); }).find("round 13 closed while round 12 is in progress"),
            std::string::npos);
  // A server holding no shard (more servers than shards) keeps no rounds and has no count to give.
  auto empty = make_update_policy({.kind = PsPolicy::Kind::Synchronous}, *s.optimizer, {}, 2, {}, s.apply);
  EXPECT_EQ(empty->push(Push{1, {.round = 7, .round_pushes = 2}, 0, 0, {}}), 0);
  EXPECT_EQ(empty->close_round(7), -1);
}

TEST(PsUpdates, AsynchronousAppliesEachPushThroughItsWorkersOwnOptimizer) {
  Shards s;
  auto policy = make_update_policy(PsPolicy{}, *s.optimizer, s.variables, 2, {}, s.apply);
  EXPECT_TRUE(policy->journals());
  EXPECT_EQ(policy->push(s.clock_push(1, 0, 0, {1, 1})), 0);
  EXPECT_EQ(policy->push(s.clock_push(0, 0, 0, {1, 1})), 1) << "computed on version 0, applied at 1: staleness 1";
  EXPECT_EQ(s.v.value.to_vector(), (std::vector<float>{8, 18}));
  ASSERT_EQ(s.applied_by.size(), 2u);
  EXPECT_NE(s.applied_by[0], s.applied_by[1]) << "each worker updates through its own copy of the state";
  EXPECT_EQ(&policy->saved(), s.applied_by[1]) << "checkpoints keep worker 0's";
  EXPECT_EQ(policy->push(s.clock_push(1, 1, 2, {0, 0})), 0);
  EXPECT_EQ(s.applied_by[2], s.applied_by[0]) << "worker 1's second push, through its own copy again";
  EXPECT_EQ(policy->saved().iterations(), 1);
  EXPECT_EQ(policy->iterations(), 2) << "the most any worker's copy has stepped";
  EXPECT_EQ(policy->push(s.clock_push(5, 0, 3, {0, 0})), 0) << "a worker added to the running job is taken";
  EXPECT_EQ(policy->ahead_counts(), (std::map<int64_t, int64_t>{{0, 4}}));
  EXPECT_EQ(policy->describe("ps:0"),
            "ps:0: 4 pushes applied; steps their worker was ahead of the slowest: p50 0, p90 0, p99 0, max 0 (no "
            "bound)");
  EXPECT_NE(error_of([&] {
              policy->push(s.clock_push(0, -1, 4, {0, 0}));
            }).find("worker 0's clock is -1"),
            std::string::npos);
}

TEST(PsUpdates, BoundedStalenessStartsFromARestoresClocksAndRefusesAWorkerTooFarAhead) {
  Shards s;
  auto policy = make_update_policy({.kind = PsPolicy::Kind::BoundedStaleness, .max_staleness = 1}, *s.optimizer,
                                   s.variables, 2, {4, 2}, s.apply);
  EXPECT_NE(error_of([&] {
              policy->push(s.clock_push(0, 4, 0, {1, 1}));
            }).find("worker 0's step 4 is 2 steps ahead of worker 1, which has finished 2 (the bound is 1)"),
            std::string::npos);
  EXPECT_EQ(s.version, 0);
  EXPECT_EQ(policy->push(s.clock_push(1, 2, 0, {1, 1})), 0);
  EXPECT_EQ(policy->push(s.clock_push(0, 4, 0, {1, 1})), 1);  // worker 1 has finished 3 now: 1 ahead
  EXPECT_NE(error_of([&] {
              policy->push(s.clock_push(7, 0, 2, {0, 0}));
            }).find("push: from worker 7, of 2"),
            std::string::npos)
      << "under a bound, no worker joins beyond the cluster";
}

}  // namespace
}  // namespace tandem::testing
