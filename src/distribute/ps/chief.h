#pragma once
// The chief of a parameter-server cluster: it initializes the servers from its model and
// optimizer, hands fit's batches to the workers (coordinator.cpp), reads the variables and the
// optimizer state back for validation and checkpoints, and ends the job.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribute/ps/cluster_link.h"
#include "distribute/ps/record.h"
#include "distribute/ps/shards.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/distribute/train_step.h"

namespace tandem::distribute {

namespace ps {
// A wait on a server that died (the chief's own reads: its copy at an epoch's end, a checkpoint's
// state) while the coordinator can restore it: restored, and read again. Past that, an Error.
struct ServerLost : Error {
  explicit ServerLost(const std::string& name)
      : Error(fmt::format("ParameterServerStrategy: {} died while the chief was reading from it", name)) {}
};
}  // namespace ps

struct ParameterServerExtended::Chief {
  Chief(ps::ClusterLink& link, const ParameterServerOptions& options) : link(link), options(options) {}
  // The servers hold the trainable variables and the optimizer's state as they are here (for a
  // later fit, the optimizer's state is first read back from the servers).
  void initialize(std::vector<Variable*> trainable, Optimizer& optimizer);
  // The servers' values and optimizer state into the chief's variables and optimizer: the copy a
  // server started again is restored from (at each epoch's end).
  void keep_copy();
  // Server s given its shards and their optimizer state from the chief's copy (init, or a restore
  // with the workers' clocks: the steps each has finished).
  void init_server(int s, const std::vector<int64_t>& clocks = {});
  // The servers' variables and optimizer state, into a checkpoint's entries.
  void collect(std::vector<std::pair<std::string, Tensor>>& state);
  void collect_once(std::vector<std::pair<std::string, Tensor>>& state);
  // Every worker and server told to end (those that answer within a second are done); under
  // --record, the record written again with what the servers applied since the last epoch's end.
  void stop_all();
  // A server's journal (int32 [n, 4]) from its answer into the record; false where it has none.
  bool take_journal(int s, const ps::Incoming& answer);

  ps::ClusterLink& link;
  const ParameterServerOptions& options;
  std::optional<ps::PsRecord> replay;  // --replay: the order to force
  // While fit's coordinator can restore a server (asynchronous): a server lost during a read.
  std::function<void()> restore_lost;
  ps::PsRecord record;  // --record: what this run did so far
  std::unique_ptr<ps::ShardTable> shards;
  Optimizer* optimizer = nullptr;
  std::vector<std::string> slot_names;  // "optimizer/<variable>/<slot>", per variable per slot
  size_t slots_per_variable = 0;
  // Asynchronous: how many steps ahead of the slowest worker's finished steps each step started
  // (by the chief's clocks; the servers' log gives theirs), over every fit of this strategy.
  std::map<int64_t, int64_t> steps_ahead;
  // The steps each worker trained whose results came back (worker index → count), over every fit.
  std::vector<int64_t> worker_steps;
};

std::unique_ptr<StepRunner> make_coordinator(ParameterServerExtended::Chief& chief, const StepParts& parts);

}  // namespace tandem::distribute
