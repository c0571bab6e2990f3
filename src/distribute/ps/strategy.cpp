// ParameterServerStrategy (tandem/distribute/parameter_server.h): each task's part.
#include <algorithm>
#include <cstdio>

#include "distribute/ps/auth.h"
#include "distribute/ps/chief.h"
#include "distribute/ps/dispatch.h"
#include "distribute/ps/local_cluster.h"
#include "distribute/ps/moving_statistics.h"
#include "distribute/ps/server.h"
#include "distribute/ps/worker.h"
#include "distribute/running_as.h"
#include "tandem/devices.h"
#include "tandem/error.h"

namespace tandem::distribute {

namespace {

// The cluster's links, made with the strategy (every task at once).
std::unique_ptr<ps::ClusterLink> link_of(const ClusterSpec& cluster, const ParameterServerOptions& options,
                                         std::shared_ptr<zmq::context_t> context) {
  cluster.require({"chief", "worker", "ps"}, {"chief", "worker", "ps"}, "ParameterServerStrategy");
  cluster.check_hosts();
  if (options.timeout.count() <= 0)
    fail("ParameterServerStrategy: the timeout must be positive, got {} ms", options.timeout.count());
  // Where the job goes on without a worker, it also starts without one that is late (not in
  // process, where a task is a thread).
  bool workers_may_miss_start = !cluster.in_process() && ps::make_dispatch_policy(options)->workers_may_die();
  if (!options.auth_dir.empty()) {
    ps::Keys keys = ps::read_keys(options.auth_dir);
    return std::make_unique<ps::ClusterLink>(cluster, options.timeout, &keys, nullptr, workers_may_miss_start);
  }
  // Without keys, anyone who reaches a listening task may read and change the variables: only
  // loopback addresses, unless the user says the network is trusted.
  if (!options.insecure)
    for (const TaskId& t : ps::tasks_in_rank_order(cluster))
      if ((t.type == "chief" || t.type == "ps") && !detail::is_loopback_host(cluster.host(t)))
        fail(
            "ParameterServerStrategy: {} listens on {}, not a loopback address: without keys, anyone on that network "
            "could read and change the variables; pass --auth DIR (`tandem keys DIR` makes the keys; "
            "ParameterServerOptions::auth_dir) or, on a network you trust, --insecure",
            cluster.describe(t), cluster.host(t));
  return std::make_unique<ps::ClusterLink>(cluster, options.timeout, nullptr, std::move(context),
                                           workers_may_miss_start);
}
// The servers hold the trainable variables; batch normalization's moving statistics live in the
// chief's model, moved by the workers' results (moving_statistics.h). A frozen layer's variables
// keep their values (its normalization runs in inference mode): every task keeps its own copy, as
// each builds or loads the same model. Any other variable that is not trainable is refused.
void require_trainable_only(const StepParts& parts) {
  std::vector<const Tensor*> moving;
  for (const layers::Layer::MovingStatistics& m : ps::moving_statistics_of(parts.replicas[0].layers))
    moving.insert(moving.end(), {m.mean, m.variance});
  for (const Variable* v : parts.replicas[0].variables)
    if (!v->trainable && !v->frozen && std::find(moving.begin(), moving.end(), &v->value) == moving.end())
      fail(
          "ParameterServerStrategy: variable \"{}\" is not trainable and not a layer's moving statistics: the "
          "servers hold trainable variables only, so the workers' updates of it would not reach the chief's model; "
          "train this model with mirrored or multiworker, freeze that layer (trainable = false), or train without it",
          v->name);
}

// A --replay record fits this cluster and run (an Error naming what differs).
void check_replay(const ps::PsRecord& replay, const ClusterSpec& cluster, const ParameterServerOptions& options) {
  if (replay.workers != cluster.count("worker") || replay.servers != cluster.count("ps"))
    fail(
        "ParameterServerStrategy: --replay {} was recorded with {} worker(s) and {} server(s); this cluster has {} "
        "worker(s) and {} server(s)",
        options.replay, replay.workers, replay.servers, cluster.count("worker"), cluster.count("ps"));
  if (replay.prefetch != options.prefetch)
    fail("ParameterServerStrategy: --replay {} was recorded {} --prefetch; this run is {} it", options.replay,
         replay.prefetch ? "with" : "without", options.prefetch ? "with" : "without");
  if (!replay.complete)
    fail(
        "ParameterServerStrategy: --replay {}: a worker or server died in the recorded run, so its order cannot be "
        "forced again",
        options.replay);
}

}  // namespace

ParameterServerExtended::ParameterServerExtended(ClusterSpec cluster, ParameterServerOptions options)
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
  if (!options_.worker_devices.empty()) {
    if (!cluster_.in_process())
      fail(
          "ParameterServerStrategy: worker_devices ({}...) are for an in-process cluster; a launched worker computes "
          "where its fit places the model (tandem fit --device)",
          options_.worker_devices[0].name());
    if (static_cast<int>(options_.worker_devices.size()) != cluster_.count("worker"))
      fail("ParameterServerStrategy: {} worker_devices for {} workers; give one per worker",
           options_.worker_devices.size(), cluster_.count("worker"));
    for (const Device& d : options_.worker_devices) check_device(d, "ParameterServerStrategy: worker_devices");
  }
  if (cluster_.in_process()) {
    if (!options_.auth_dir.empty() || options_.insecure)
      fail(
          "ParameterServerStrategy: an in-process cluster has no network to secure: --auth and --insecure "
          "(auth_dir, insecure) are for a cluster of processes");
    if (options_.min_workers != 1)
      fail(
          "ParameterServerStrategy: --min-workers {} is for a cluster of processes, whose workers may die; an "
          "in-process cluster's workers are threads that end with it",
          options_.min_workers);
    if (options_.threads_per_worker < 0)
      fail("ParameterServerStrategy: threads_per_worker must be 0 (automatic) or more, got {}",
           options_.threads_per_worker);
    if (!is_chief()) fail("ParameterServerStrategy: an in-process cluster is made by its chief");
    if (!options_.replay.empty()) check_replay(ps::read_record(options_.replay), cluster_, options_);
    return;  // the tasks start with each fit (start_local)
  }
  connect();
}

void ParameterServerExtended::connect() {
  std::optional<ps::PsRecord> replay;
  if (!options_.replay.empty() && is_chief()) {
    replay = ps::read_record(options_.replay);
    check_replay(*replay, cluster_, options_);
  }
  links_ = std::make_unique<Links>(Links{link_of(cluster_, options_, local_ ? local_->context : nullptr)});
  if (is_chief()) {
    chief_ = std::make_unique<Chief>(*links_->link, options_);
    chief_->replay = std::move(replay);
    chief_->record.workers = cluster_.count("worker");
    chief_->record.servers = cluster_.count("ps");
    chief_->record.prefetch = options_.prefetch;
    chief_->record.applied.resize(static_cast<size_t>(cluster_.count("ps")));
  }
  // In process, a task is a thread: one that fails ends the job.
  if (!is_chief() || cluster_.in_process()) return;
  // Asynchronous without a bound, the job goes on without a worker that dies (its steps go to the
  // others), takes it back when it is started again, and takes workers added while it runs; a
  // server that dies is restored when it is started again. Not in a replay: a death cannot be
  // replayed. Synchronous without backup workers, a worker that dies is dropped from the rounds.
  // (Control ranks: the chief 0, the servers 1..P, the workers after.)
  auto policy = ps::make_dispatch_policy(options_);
  if (policy->servers_may_die()) {
    links_->link->control().set_expendable([](int rank) { return rank >= 1; });
  } else if (policy->workers_may_die()) {
    int first = 1 + cluster_.count("ps"), last = cluster_.count("ps") + cluster_.count("worker");
    links_->link->control().set_expendable([first, last](int rank) { return rank >= first && rank <= last; });
  }
}

ParameterServerExtended::~ParameterServerExtended() {
  if (cluster_.in_process()) {
    stop_local();
    return;
  }
  if (chief_ && !links_->link->control().failed()) {
    chief_->stop_all();
    detail::ControlPlane& control = links_->link->control();
    bool left = control.leave_and_wait();
    // A task lost after the coordinator's last look (stopped or killed as the job ended) is named
    // here: the job has finished without it, and nothing else would say so.
    for (const auto& event : control.take_events())
      if (!event.joined) std::fprintf(stderr, "chief: %s, after the job's last step\n", event.what.c_str());
    if (!left) std::fprintf(stderr, "chief: %s, after the job's last step\n", control.failure().c_str());
  }
}

std::string ParameterServerExtended::name() const {
  std::string name =
      fmt::format("ps-{}:{}x{}", options_.mode == PsMode::Synchronous ? "sync" : "async", num_servers(), num_workers());
  if (options_.max_staleness >= 0)
    name = fmt::format("ps-ssp:{}x{}:{}", num_servers(), num_workers(), options_.max_staleness);
  if (options_.backup_workers > 0) name += fmt::format(":{}", options_.backup_workers);
  return cluster_.in_process() ? name + ":threads" : name;
}

void ParameterServerExtended::for_each_replica(const std::function<void(int replica)>& fn) {
  RunningAs as(*this, 0);
  fn(0);
}

Communicator& ParameterServerExtended::communicator(int replica) { return *comm_.at(static_cast<size_t>(replica)); }

std::map<std::string, std::map<int64_t, int64_t>> ParameterServerExtended::report_counts() const {
  std::map<int64_t, int64_t> ahead = steps_ahead();
  if (!is_chief() || ahead.empty()) return {};
  return {{"steps_ahead_of_slowest", std::move(ahead)}};
}

std::map<int64_t, int64_t> ParameterServerExtended::steps_ahead() const {
  std::map<int64_t, int64_t> ahead = steps_ahead_before_;
  if (chief_)
    for (auto [steps, count] : chief_->steps_ahead) ahead[steps] += count;
  return ahead;
}

std::vector<int64_t> ParameterServerExtended::replica_runs() const {
  std::vector<int64_t> runs = worker_steps_before_;
  if (chief_) {
    runs.resize(std::max(runs.size(), chief_->worker_steps.size()), 0);
    for (size_t w = 0; w < chief_->worker_steps.size(); ++w) runs[w] += chief_->worker_steps[w];
  }
  return runs;
}

bool ParameterServerExtended::is_chief() const { return cluster_.task().type == "chief"; }

bool ParameterServerExtended::serves() const { return !is_chief(); }

std::unique_ptr<StepRunner> ParameterServerExtended::make_step(const StepParts& parts) {
  if (!is_chief())
    fail("ParameterServerStrategy: only the chief runs fit's steps ({} serves)", cluster_.describe(cluster_.task()));
  require_trainable_only(parts);
  // Each server updates its shards: whole variables unless a partitioner cuts them, all of them
  // where there is one server.
  parts.optimizer.check_clipping_applies(name(), options_.partitioner.kind == Partitioner::Kind::None,
                                         cluster_.count("ps") == 1);
  if (cluster_.in_process()) return start_local(parts);
  return make_coordinator(*chief_, parts);
}

void ParameterServerExtended::serve(const StepParts& parts) {
  require_trainable_only(parts);
  ps::serve_task(*links_->link, options_, parts, parts.optimizer.clone());
}

namespace ps {
void serve_task(ClusterLink& link, const ParameterServerOptions& options, const StepParts& parts,
                std::unique_ptr<Optimizer> server_optimizer) {
  if (link.task().type == "worker") {
    serve_as_worker(link, options, parts);
  } else {
    ParameterServer server(link.describe(link.task()), std::move(server_optimizer), link.workers());
    server.set_phase = [&](const std::string& phase) { return link.control().set_phase(phase); };
    server.serve(link.own_socket(), [&] {
      link.set_requests_refused(server.refused());  // for the task's closing line, however it ends
      link.check_failed();                          // an Error when a task failed: this one ends too
      return false;                                 // else until the chief's stop
    });
    link.set_requests_refused(server.refused());
  }
  link.control().leave_and_wait();
}
}  // namespace ps

std::string ParameterServerExtended::set_phase(const std::string& phase) {
  return links_ ? links_->link->control().set_phase(phase) : std::string();
}

void ParameterServerExtended::collect_state(std::vector<std::pair<std::string, Tensor>>& state) {
  if (chief_) chief_->collect(state);
}

}  // namespace tandem::distribute
