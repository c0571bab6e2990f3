// The strategies' registry (strategy_registry.h): the rooms' entries, in the grammar's order, and
// make_strategy, which finds a name's entry and lets it read the rest.
#include "tandem/distribute/strategy_registry.h"

#include <algorithm>

#include "distribute/strategy_words.h"
#include "tandem/collectives/mpi.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

std::optional<int> count_in_name(const std::string& word, int most) {
  if (word.empty() || word.size() > 9 || word.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(word) < 1 || std::stoi(word) > most)
    return std::nullopt;
  return std::stoi(word);
}

std::vector<std::string> words_of(const std::string& spec) {
  std::vector<std::string> words;
  for (size_t at = 0;;) {
    size_t colon = spec.find(':', at);
    words.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) return words;
    at = colon + 1;
  }
}

std::shared_ptr<Communicator> launched_world(const std::string& spec, const StrategySettings& settings) {
  if (!mpi_built()) fail("strategy \"{}\": this Tandem was built without MPI (install libopenmpi-dev)", spec);
  return make_mpi_world_communicator(
      {.timeout = settings.timeout, .on_failure = settings.on_failure, .insecure = settings.insecure});
}

// Registered by an explicit list, not by static initializers: from a static library the linker
// keeps only the objects something refers to, and a room nobody named would silently be missing.
const std::vector<StrategyEntry>& strategy_entries() {
  static const std::vector<StrategyEntry> entries = [] {
    std::vector<StrategyEntry> all;
    add_data_parallel_strategies(all);
    add_parameter_server_strategies(all);
    add_model_parallel_strategies(all);
    add_pipeline_strategies(all);
    return all;
  }();
  return entries;
}

namespace {
const StrategyEntry* entry_named(const std::string& name) {
  for (const StrategyEntry& e : strategy_entries())
    if (e.name == name) return &e;
  return nullptr;
}
}  // namespace

const StrategyEntry* strategy_entry(const std::string& spec) {
  size_t plus = spec.find('+');
  std::string named = plus == std::string::npos ? spec : spec.substr(plus + 1);
  return entry_named(words_of(named)[0]);
}

std::string strategy_grammar() {
  std::string text;
  for (const StrategyEntry& e : strategy_entries()) text += e.grammar + ", ";
  std::string copies;
  for (const StrategyEntry& e : strategy_entries())
    if (e.copies) copies += (copies.empty() ? "" : " or ") + e.grammar;
  return text + "or mirrored:D+ (" + copies + ")";
}

std::string strategy_help() {
  std::string text, copies;
  for (const StrategyEntry& e : strategy_entries()) {
    text += fmt::format("{}{}: {}", text.empty() ? "" : "; ", e.grammar, e.help);
    if (e.copies) copies += (copies.empty() ? "" : " or ") + fmt::format("mirrored:D+{}", e.grammar);
  }
  return text + "; or " + copies + " (D copies of the split model, each on its rows of the batch)";
}

std::string compare_grammar() {
  std::string text, copies;
  for (const StrategyEntry& e : strategy_entries()) {
    text += (e.needs_launcher ? e.launch_grammar : e.grammar) + ", ";
    if (e.copies) copies += (copies.empty() ? "" : " or ") + fmt::format("mirrored:D+{}", e.grammar);
  }
  return text + copies;
}

bool launches_processes(const std::string& spec) {
  const StrategyEntry* entry = strategy_entry(spec);
  return entry != nullptr && entry->needs_launcher && words_of(spec).back() != "threads";
}

std::string strategies_reading(const std::string& flag) {
  std::string names;
  for (const StrategyEntry& e : strategy_entries())
    if (std::find(e.flags.begin(), e.flags.end(), flag) != e.flags.end()) names += (names.empty() ? "" : ", ") + e.name;
  return names;
}

void refuse_past_cores(const std::string& spec, int groups, const char* what) {
  int cores = usable_cores();
  if (groups <= kMostPerCore * cores) return;
  fail(
      "strategy \"{}\": {} {} on {} usable core{}: past {} per core ({} here) they only take turns, and each step's "
      "hand-offs between them outweigh its work; use at most {} (one per core runs fastest)",
      spec, groups, what, cores, cores == 1 ? "" : "s", kMostPerCore, kMostPerCore * cores, kMostPerCore * cores);
}

void bad_strategy(const std::string& spec, const std::string& why) {
  fail("strategy \"{}\": {}; expected {}", spec, why, strategy_grammar());
}

std::unique_ptr<Strategy> make_strategy(const std::string& spec, const StrategySettings& settings) {
  if (size_t plus = spec.find('+'); plus != std::string::npos) {  // data × model: mirrored:D+model-parallel:T
    std::string data = spec.substr(0, plus), model = spec.substr(plus + 1);
    std::optional<int> d = data.starts_with("mirrored:") ? count_in_name(data.substr(9), kMaxThreads) : std::nullopt;
    const StrategyEntry* entry = entry_named(words_of(model)[0]);
    if (!d || entry == nullptr || !entry->copies)
      bad_strategy(spec,
                   "data × model is mirrored:D+model-parallel:T or mirrored:D+pipeline:S[:M] (D copies of the model "
                   "split T ways or cut into S stages)");
    return entry->make(spec, words_of(model), *d, settings);
  }
  std::vector<std::string> words = words_of(spec);
  const StrategyEntry* entry = entry_named(words[0]);
  if (entry == nullptr) bad_strategy(spec, "unknown strategy \"" + words[0] + "\"");
  return entry->make(spec, words, 1, settings);
}

std::unique_ptr<Strategy> make_strategy(const std::string& spec, int threads_per_replica) {
  StrategySettings settings;
  settings.threads_per_replica = threads_per_replica;
  return make_strategy(spec, settings);
}

}  // namespace tandem::distribute
