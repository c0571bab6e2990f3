// The chief's coordinator (coordinator.h) when a task dies: a worker's steps handed to the others
// or its round closed without it, a worker started again or added greeted, a server restored
// from the chief's copy and the called-back steps sent again.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "distribute/ps/coordinator.h"
#include "tandem/error.h"

namespace tandem::distribute::ps {

void Coordinator::lose_worker(int w) {
  size_t before = orphans_.size();
  clocks_.alive[static_cast<size_t>(w)] = false;
  called_back_.erase(w);
  orphan_steps_of(w);
  if (rounds()) {
    size_t dropped = orphans_.size() - before;
    round_short_ = round_short_ || dropped > 0;
    not_trained_ += static_cast<int64_t>(dropped);
    orphans_.clear();
  }
}

void Coordinator::orphan_steps_of(int w) {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->second.worker == w && !it->second.done) {
      orphans_.push_back(std::move(it->second));
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
  clocks_.started[static_cast<size_t>(w)] = clocks_.finished[static_cast<size_t>(w)];
  std::erase(free_, w);
}

void Coordinator::hand_again_what_died() {
  while (!orphans_.empty()) {
    int w = take_free_worker();
    Sent s = std::move(orphans_.front());
    orphans_.pop_front();
    ++handed_again_;
    dispatch(w, s.batch, s.key, s.first_row, s.round_rows, s.pushes);
  }
}

void Coordinator::watch_workers() {
  for (const auto& event : link_.control().take_events()) {
    if (event.joined) {
      welcome_back(event.rank - 1 - link_.servers());
      continue;
    }
    if (event.rank < 1) continue;
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
      std::fprintf(stderr, "chief: %s; %sthe rounds go on with %d worker(s)\n", event.what.c_str(),
                   round_short_ ? "the round in progress is closed without its result, and " : "", alive_count());
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

// A worker whose control connection came after it was lost, with no greeting since: one greeted
// at start-up, then stopped past the timeout before it connected. It has its route: it trains
// again. (A worker started again greets first, and is alive by then: greet.)
void Coordinator::welcome_back(int w) {
  if (w < 0 || w >= workers() || w >= link_.routed_workers() || clocks_.alive[static_cast<size_t>(w)] ||
      link_.worker_route(w).empty())
    return;
  clocks_.alive[static_cast<size_t>(w)] = true;
  free_.push_back(w);
  std::fprintf(stderr, "chief: %s joined the running job; it gets the next step\n",
               link_.describe({"worker", w}).c_str());
}

void Coordinator::restore_after_lost_read() {
  chief_.record.complete = false;
  for (int s = 0; s < link_.servers(); ++s) link_.reconnect_server(s);
  watch_workers();
}

void Coordinator::restore_server(const LostServer& lost) {
  restoring_ = true;
  chief_.record.complete = false;
  restoring_server_ = lost.server;
  std::string name = link_.describe({"ps", lost.server});
  std::fprintf(stderr, "chief: %s; every step in flight is called back until it is started again and restored\n",
               lost.what.c_str());
  size_t orphans = orphans_.size();
  for (int w = 0; w < workers(); ++w) {
    if (!clocks_.alive[static_cast<size_t>(w)]) continue;
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
  chief_.init_server(lost.server, clocks_.finished);
  auto deadline = std::chrono::steady_clock::now() + link_.timeout();
  while (!called_back_.empty()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::string who;
      for (int w : called_back_) who += (who.empty() ? "" : ", ") + link_.describe({"worker", w});
      fail("ParameterServerStrategy: {} did not give back its step within {} s", who, link_.timeout().count() / 1000.0);
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

void Coordinator::greet(const Incoming& hello) {
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
           (clocks_.alive[static_cast<size_t>(w)] || !link_.control().lost(worker_rank(static_cast<int>(w)))))
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
  clocks_.alive[static_cast<size_t>(w)] = true;
  free_.push_back(static_cast<int>(w));
  std::fprintf(stderr, "chief: %s joined the running job; it gets the next step\n",
               link_.describe({"worker", static_cast<int>(w)}).c_str());
}

}  // namespace tandem::distribute::ps
