// The chief's coordinator (coordinator.h) under --record and --replay: the recorded worker of
// each step, and the record written at each epoch's end.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "distribute/ps/coordinator.h"
#include "tandem/error.h"

namespace tandem::distribute::ps {

int Coordinator::take_recorded_worker(const Batch& b) {
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

void Coordinator::write_record() {
  auto& sockets = link_.server_sockets();
  for (int s = 0; s < link_.servers(); ++s) {
    Outgoing(MessageType::Journal, 0).send(sockets[static_cast<size_t>(s)]);
    Incoming answer = link_.await(sockets[static_cast<size_t>(s)], false, link_.describe({"ps", s}));
    if (answer.envelope.type != MessageType::Journal || !chief_.take_journal(s, answer))
      fail("ParameterServerStrategy: {} did not give its journal (--record)", link_.describe({"ps", s}));
  }
  if (workers_lost_ > 0) chief_.record.complete = false;
  ps::write_record(chief_.options.record, chief_.record);
}

}  // namespace tandem::distribute::ps
