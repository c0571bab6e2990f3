// Records of asynchronous parameter-server runs (record.h).
#include "distribute/ps/record.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "tandem/error.h"
#include "tandem/io.h"

namespace tandem::distribute::ps {

int32_t record_field(int64_t value, const char* what) {
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max())
    fail("--record: {} {} does not fit the record's 32-bit field; record a shorter run", what, value);
  return static_cast<int32_t>(value);
}

void write_record(const std::string& path, const PsRecord& record) {
  nlohmann::json out = {{"tandem_ps_record", 1},       {"workers", record.workers},
                        {"servers", record.servers},   {"complete", record.complete},
                        {"prefetch", record.prefetch}, {"initial_weights", record.initial_weights},
                        {"steps", record.steps},       {"servers_applied", record.applied}};
  io::write_file_atomically(path, out.dump() + "\n");
}

PsRecord read_record(const std::string& path) {
  std::string text = io::read_file(path);
  nlohmann::json in = nlohmann::json::parse(text, nullptr, false);
  auto bad = [&](const std::string& what) {
    fail("--replay {}: not a record of a parameter-server run (tandem fit --record writes one): {}", path, what);
  };
  if (in.is_discarded() || !in.is_object()) bad("not a JSON object");
  if (!in.contains("tandem_ps_record") || in["tandem_ps_record"] != 1) bad("no \"tandem_ps_record\": 1");
  PsRecord r;
  try {
    r.workers = in.at("workers").get<int>();
    r.servers = in.at("servers").get<int>();
    r.complete = in.at("complete").get<bool>();
    r.prefetch = in.at("prefetch").get<bool>();
    r.initial_weights = in.at("initial_weights").get<std::string>();
    r.steps = in.at("steps").get<std::vector<std::array<int32_t, 3>>>();
    r.applied = in.at("servers_applied").get<std::vector<std::vector<PsRecord::Event>>>();
  } catch (const nlohmann::json::exception& e) {
    bad(e.what());
  }
  if (r.workers < 1 || r.servers < 1 || static_cast<int>(r.applied.size()) != r.servers)
    bad(fmt::format("{} workers, {} servers and {} servers' orders", r.workers, r.servers, r.applied.size()));
  for (const auto& step : r.steps)
    if (step[0] < 0 || step[0] >= r.workers) bad(fmt::format("a step taken by worker {} of {}", step[0], r.workers));
  for (const auto& server : r.applied)
    for (const auto& e : server)
      if ((e[0] != PsRecord::kPull && e[0] != PsRecord::kPush) || e[1] < 0 || e[1] >= r.workers)
        bad(fmt::format("an event [{}, {}, ...] (kind 0 or 1, worker below {})", e[0], e[1], r.workers));
  return r;
}

}  // namespace tandem::distribute::ps
