// ParameterServerStrategy (tandem/distribute/parameter_server.h): each task's part.
#include <cstdio>

#include "distribute/ps/auth.h"
#include "distribute/ps/chief.h"
#include "distribute/ps/server.h"
#include "distribute/ps/worker.h"
#include "distribute/running_as.h"
#include "tandem/error.h"

namespace tandem::distribute {

namespace {
// The cluster's links, made with the strategy (every task at once).
bool is_loopback(const std::string& host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1" || host == "[::1]";
}

std::unique_ptr<ps::ClusterLink> link_of(const ClusterSpec& cluster, const ParameterServerOptions& options) {
  cluster.require({"chief", "worker", "ps"}, {"chief", "worker", "ps"}, "ParameterServerStrategy");
  cluster.check_hosts();
  if (options.timeout.count() <= 0)
    fail("ParameterServerStrategy: the timeout must be positive, got {} ms", options.timeout.count());
  if (!options.auth_dir.empty()) {
    ps::Keys keys = ps::read_keys(options.auth_dir);
    return std::make_unique<ps::ClusterLink>(cluster, options.timeout, &keys);
  }
  // Without keys, anyone who reaches a listening task may read and change the variables: only
  // loopback addresses, unless the user says the network is trusted.
  if (!options.insecure)
    for (const TaskId& t : ps::tasks_in_rank_order(cluster))
      if ((t.type == "chief" || t.type == "ps") && !is_loopback(cluster.host(t)))
        fail(
            "ParameterServerStrategy: {} listens on {}, not a loopback address: without keys, anyone on that network "
            "could read and change the variables; pass --auth DIR (`tandem keys DIR` makes the keys; "
            "ParameterServerOptions::auth_dir) or, on a network you trust, --insecure",
            cluster.describe(t), cluster.host(t));
  return std::make_unique<ps::ClusterLink>(cluster, options.timeout);
}
// The servers hold the trainable variables; a layer's own statistics (batch normalization's moving
// mean and variance), updated by the workers' forward passes, would never reach the chief's model.
void require_trainable_only(const StepParts& parts) {
  for (const Variable* v : parts.replicas[0].variables)
    if (!v->trainable)
      fail(
          "ParameterServerStrategy: variable \"{}\" is not trainable (a layer's own statistics, as batch "
          "normalization's): the servers hold trainable variables only, so the workers' updates of it would not "
          "reach the chief's model; train this model with mirrored or multiworker, or without that layer",
          v->name);
}

}  // namespace

struct ParameterServerStrategy::Links {
  std::unique_ptr<ps::ClusterLink> link;
};

ParameterServerStrategy::ParameterServerStrategy(ClusterSpec cluster, ParameterServerOptions options)
    : cluster_(std::move(cluster)), options_(options), comm_(make_in_process_communicators(1)) {
  if (options_.max_staleness < -1)
    fail("ParameterServerStrategy: max_staleness must be 0 or more (or -1: no bound), got {}", options_.max_staleness);
  if (options_.max_staleness >= 0 && options_.mode == PsMode::Synchronous)
    fail("ParameterServerStrategy: max_staleness bounds the asynchronous mode; the synchronous one has none");
  if (options_.max_staleness == 0) options_.mode = PsMode::Synchronous;  // S = 0: every step waits for all
  if (options_.backup_workers < 0 || (options_.backup_workers > 0 && options_.mode != PsMode::Synchronous))
    fail("ParameterServerStrategy: backup_workers is for the synchronous mode, 0 or more, got {}",
         options_.backup_workers);
  if (options_.backup_workers >= cluster_.count("worker"))
    fail("ParameterServerStrategy: {} backup workers of {} workers leave no gradient to apply (at most {})",
         options_.backup_workers, cluster_.count("worker"), cluster_.count("worker") - 1);
  bool unbounded = options_.mode == PsMode::Asynchronous && options_.max_staleness < 0;
  if (options_.min_workers < 1 || options_.min_workers > cluster_.count("worker"))
    fail("ParameterServerStrategy: min_workers (--min-workers) must be from 1 to the {} workers, got {}",
         cluster_.count("worker"), options_.min_workers);
  if ((!options_.record.empty() || !options_.replay.empty()) && !unbounded)
    fail(
        "ParameterServerStrategy: --record and --replay are for the asynchronous mode without a staleness bound (the "
        "synchronous modes give the same weights every run already)");
  if (!options_.record.empty() && !options_.replay.empty())
    fail("ParameterServerStrategy: --record and --replay together: give one");
  std::optional<ps::PsRecord> replay;
  if (!options_.replay.empty() && cluster_.task().type == "chief") {
    replay = ps::read_record(options_.replay);
    if (replay->workers != cluster_.count("worker") || replay->servers != cluster_.count("ps"))
      fail(
          "ParameterServerStrategy: --replay {} was recorded with {} worker(s) and {} server(s); this cluster has {} "
          "worker(s) and {} server(s)",
          options_.replay, replay->workers, replay->servers, cluster_.count("worker"), cluster_.count("ps"));
    if (replay->prefetch != options_.prefetch)
      fail("ParameterServerStrategy: --replay {} was recorded {} --prefetch; this run is {} it", options_.replay,
           replay->prefetch ? "with" : "without", options_.prefetch ? "with" : "without");
    if (!replay->complete)
      fail(
          "ParameterServerStrategy: --replay {}: a worker or server died in the recorded run, so its order cannot be "
          "forced again",
          options_.replay);
  }
  links_ = std::make_unique<Links>(Links{link_of(cluster_, options_)});
  if (is_chief()) {
    chief_ = std::make_unique<Chief>(*links_->link, options_);
    chief_->replay = std::move(replay);
    chief_->record.workers = cluster_.count("worker");
    chief_->record.servers = cluster_.count("ps");
    chief_->record.prefetch = options_.prefetch;
    chief_->record.applied.resize(static_cast<size_t>(cluster_.count("ps")));
  }
  // Asynchronous without a bound, the job goes on without a worker that dies (its steps go to the
  // others), takes it back when it is started again, and takes workers added while it runs; a
  // server that dies is restored when it is started again. Not in a replay: a death cannot be
  // replayed. (Control ranks: the chief 0, the servers 1..P, the workers after.)
  if (is_chief() && unbounded && options_.replay.empty())
    links_->link->control().set_expendable([](int rank) { return rank >= 1; });
  // Synchronous without backup workers, a worker that dies is dropped from the rounds.
  if (is_chief() && options_.mode == PsMode::Synchronous && options_.backup_workers == 0) {
    int first = 1 + cluster_.count("ps"), last = cluster_.count("ps") + cluster_.count("worker");
    links_->link->control().set_expendable([first, last](int rank) { return rank >= first && rank <= last; });
  }
}

ParameterServerStrategy::~ParameterServerStrategy() {
  if (chief_ && !links_->link->control().failed()) {
    chief_->stop_all();
    links_->link->control().leave_and_wait();
  }
}

std::string ParameterServerStrategy::name() const {
  if (options_.max_staleness >= 0)
    return fmt::format("ps-ssp:{}x{}:{}", num_servers(), num_workers(), options_.max_staleness);
  if (options_.backup_workers > 0)
    return fmt::format("ps-sync:{}x{}:{}", num_servers(), num_workers(), options_.backup_workers);
  return fmt::format("ps-{}:{}x{}", options_.mode == PsMode::Synchronous ? "sync" : "async", num_servers(),
                     num_workers());
}

void ParameterServerStrategy::for_each_replica(const std::function<void(int replica)>& fn) {
  RunningAs as(this, 0);
  fn(0);
}

Communicator& ParameterServerStrategy::communicator(int replica) { return *comm_.at(static_cast<size_t>(replica)); }

std::map<std::string, std::map<int64_t, int64_t>> ParameterServerStrategy::report_counts() const {
  std::map<int64_t, int64_t> ahead = steps_ahead();
  if (!is_chief() || ahead.empty()) return {};
  return {{"steps_ahead_of_slowest", std::move(ahead)}};
}

std::map<int64_t, int64_t> ParameterServerStrategy::steps_ahead() const {
  return chief_ ? chief_->steps_ahead : std::map<int64_t, int64_t>{};
}

bool ParameterServerStrategy::is_chief() const { return cluster_.task().type == "chief"; }

bool ParameterServerStrategy::serves() const { return !is_chief(); }

std::unique_ptr<StepRunner> ParameterServerStrategy::make_step(const StepParts& parts) {
  if (!chief_)
    fail("ParameterServerStrategy: only the chief runs fit's steps ({} serves)", cluster_.describe(cluster_.task()));
  require_trainable_only(parts);
  return make_coordinator(*chief_, parts);
}

void ParameterServerStrategy::serve(const StepParts& parts) {
  require_trainable_only(parts);
  ps::ClusterLink& link = *links_->link;
  if (cluster_.task().type == "worker") {
    ps::serve_as_worker(link, options_, parts);
  } else {
    ps::ParameterServer server(cluster_.describe(cluster_.task()), parts.optimizer.clone(), link.workers());
    server.serve(link.own_socket(), [&] {
      link.check_failed();  // an Error when a task failed: this one ends too
      return false;         // else until the chief's stop
    });
  }
  link.control().leave_and_wait();
}

std::string ParameterServerStrategy::set_phase(const std::string& phase) {
  return links_->link->control().set_phase(phase);
}

void ParameterServerStrategy::collect_state(std::vector<std::pair<std::string, Tensor>>& state) {
  if (chief_) chief_->collect(state);
}

}  // namespace tandem::distribute
