// The chief's side of a parameter-server cluster (chief.h): servers initialized, read back, stopped.
#include "distribute/ps/chief.h"

#include "tandem/error.h"

namespace tandem::distribute {

using ps::Incoming;
using ps::MessageType;
using ps::Outgoing;
using ps::PsPolicy;
using ps::ShardTable;

namespace {

// The servers' update policy, from the options the strategy checked (its constructor made a
// staleness bound of 0 synchronous).
PsPolicy policy_of(const ParameterServerOptions& options) {
  if (options.mode == PsMode::Synchronous)
    return {.kind = PsPolicy::Kind::Synchronous, .backup_workers = options.backup_workers};
  if (options.max_staleness > 0)
    return {.kind = PsPolicy::Kind::BoundedStaleness, .max_staleness = options.max_staleness};
  return {};
}

}  // namespace

void ParameterServerExtended::Chief::initialize(std::vector<Variable*> trainable, Optimizer& opt) {
  if (shards && optimizer == &opt) {  // another fit: the optimizer's state is the servers', not the stale copy here
    std::vector<std::pair<std::string, Tensor>> servers = opt.state();
    collect(servers);
    opt.load_state(servers, shards->variables());
  }
  optimizer = &opt;
  shards = std::make_unique<ShardTable>(std::move(trainable), link.servers(), options.partitioner);
  const auto& variables = shards->variables();
  opt.build(variables);
  std::vector<std::pair<std::string, Tensor>> state = opt.state();
  slots_per_variable = variables.empty() ? 0 : (state.size() - 1) / variables.size();
  slot_names.clear();
  for (size_t i = 1; i < state.size(); ++i) slot_names.push_back(state[i].first);
  for (int s = 0; s < link.servers(); ++s) init_server(s);
}

void ParameterServerExtended::Chief::init_server(int s, const std::vector<int64_t>& clocks) {
  const auto& variables = shards->variables();
  std::vector<std::pair<std::string, Tensor>> state = optimizer->state();
  Outgoing init(MessageType::Init, 0, optimizer->iterations(), 0);
  init.add(0, 0, ps::encode(policy_of(options)), ps::kPolicyItem);
  for (size_t i : shards->on_server(s)) {
    const ShardPlacement& p = shards->placement()[i];
    auto v = static_cast<size_t>(p.variable);
    init.add(static_cast<uint32_t>(p.variable), static_cast<uint32_t>(p.shard),
             ShardTable::rows(variables[v]->value, p).clone());
    for (size_t k = 0; k < slots_per_variable; ++k)
      init.add(static_cast<uint32_t>(p.variable), static_cast<uint32_t>(p.shard),
               ShardTable::rows(state[1 + v * slots_per_variable + k].second, p).clone(), static_cast<int64_t>(k) + 1);
  }
  if (!options.record.empty()) init.add(0, 0, Tensor::from_vector({1}, std::vector<int32_t>{1}), -3);
  if (replay) {
    const auto& order = replay->applied[static_cast<size_t>(s)];
    std::vector<int32_t> flat;
    for (const auto& e : order) flat.insert(flat.end(), e.begin(), e.end());
    init.add(0, 0, Tensor::from_vector({static_cast<int64_t>(order.size()), 4}, flat), -2);
  }
  if (!clocks.empty()) {
    std::vector<int32_t> values(clocks.begin(), clocks.end());
    init.add(0, 0, Tensor::from_vector({static_cast<int64_t>(values.size())}, values), -1);
  }
  auto& socket = link.server_sockets()[static_cast<size_t>(s)];
  init.send(socket);
  Incoming answer = link.await(socket, false, link.describe({"ps", s}));
  if (answer.envelope.type != MessageType::Ready)
    fail("ParameterServerStrategy: {} refused the variables: {}", link.describe({"ps", s}),
         answer.items.empty() ? "" : std::string(answer.items[0].payload));
}

void ParameterServerExtended::Chief::keep_copy() {
  if (!shards) return;
  std::vector<std::pair<std::string, Tensor>> state = optimizer->state();
  size_t optimizer_entries = state.size();
  for (Variable* v : shards->variables()) state.emplace_back(v->name, Tensor());
  collect(state);
  for (size_t v = 0; v < shards->variables().size(); ++v)
    shards->variables()[v]->value.copy_from(state[optimizer_entries + v].second);
  state.resize(optimizer_entries);
  optimizer->load_state(state, shards->variables());
}

void ParameterServerExtended::Chief::collect(std::vector<std::pair<std::string, Tensor>>& state) {
  for (;;) {  // a server lost meanwhile (a checkpoint's read) is restored, and the state read again
    try {
      return collect_once(state);
    } catch (const ps::ServerLost&) {
      if (!restore_lost) throw;
      restore_lost();
    }
  }
}

void ParameterServerExtended::Chief::collect_once(std::vector<std::pair<std::string, Tensor>>& state) {
  if (!shards) return;  // nothing trained yet: the state is the chief's own
  const auto& variables = shards->variables();
  std::vector<Tensor> values;
  std::vector<std::vector<Tensor>> slots(variables.size());
  for (size_t v = 0; v < variables.size(); ++v) {
    values.push_back(Tensor::empty(variables[v]->value.shape()));
    for (size_t k = 0; k < slots_per_variable; ++k) slots[v].push_back(Tensor::empty(variables[v]->value.shape()));
  }
  auto& sockets = link.server_sockets();
  for (auto& socket : sockets) Outgoing(MessageType::Fetch, 0).send(socket);
  int64_t iterations = 0;
  for (int s = 0; s < link.servers(); ++s) {
    Incoming answer = link.await(sockets[static_cast<size_t>(s)], false, link.describe({"ps", s}));
    if (answer.envelope.type != MessageType::State)
      fail("ParameterServerStrategy: {} did not give its state: {}", link.describe({"ps", s}),
           answer.items.empty() ? "" : std::string(answer.items[0].payload));
    shards->write(s, answer, values, &slots);
    iterations = std::max(iterations, answer.envelope.step);
  }
  for (auto& [name, tensor] : state) {
    for (size_t v = 0; v < variables.size(); ++v) {
      if (name == variables[v]->name) tensor = values[v];
      for (size_t k = 0; k < slots_per_variable; ++k)
        if (name == slot_names[v * slots_per_variable + k]) tensor = slots[v][k];
    }
    if (name == "optimizer/iterations")
      tensor = Tensor::from_vector({1}, std::vector<int32_t>{static_cast<int32_t>(iterations)});
  }
}

void ParameterServerExtended::Chief::stop_all() {
  for (int w = 0; w < link.routed_workers(); ++w) {  // workers added to the running job included
    if (link.worker_route(w).empty()) continue;
    try {
      Outgoing(MessageType::Stop, 0).send(link.own_socket(), &link.worker_route(w));
    } catch (const std::exception&) {  // a worker already gone
    }
  }
  for (auto& socket : link.server_sockets()) Outgoing(MessageType::Stop, 0).send(socket);
  bool journals = !options.record.empty();
  for (int s = 0; s < link.servers(); ++s) {
    auto answer = ps::receive(link.server_sockets()[static_cast<size_t>(s)], std::chrono::milliseconds(1000), false);
    journals = journals && answer && answer->envelope.type == MessageType::Stop && take_journal(s, *answer);
  }
  if (journals) ps::write_record(options.record, record);
}

bool ParameterServerExtended::Chief::take_journal(int s, const ps::Incoming& answer) {
  if (answer.items.size() != 1 || answer.items[0].header.dtype != DType::Int32 ||
      answer.items[0].header.shape.rank() != 2 || answer.items[0].header.shape[1] != 4)
    return false;
  Tensor events = answer.items[0].tensor();
  const int32_t* e = events.data<int32_t>();
  for (int64_t i = 0; i < events.dim(0); ++i)
    record.applied[static_cast<size_t>(s)].push_back({e[4 * i], e[4 * i + 1], e[4 * i + 2], e[4 * i + 3]});
  return true;
}

}  // namespace tandem::distribute
