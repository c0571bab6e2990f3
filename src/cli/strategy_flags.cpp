// What the strategies' registry gives fit's flags (common.h): --strategy's help, and the check that
// a strategy's own flags come only with a strategy that reads them.
#include <algorithm>

#include "cli/common.h"

namespace tandem::cli {

// --strategy's help: the registry's, then what the name changes in the other flags.
std::string strategy_help() {
  return distribute::strategy_help() +
         ". --threads is then per replica, device or in-process worker. --batch-size is the global batch, except on a "
         "parameter-server cluster (TF_CONFIG; `tandem launch --ps P --workers W` starts one here; or :threads), where "
         "it is the "
         "batch each worker computes per step and an epoch is one pass over the data by all the workers together";
}

std::string for_strategies(const char* flag, const std::string& text) {
  return distribute::strategies_reading(flag) + ": " + text;
}

void check_strategy_flags(const std::string& spec, const std::vector<std::pair<const char*, bool>>& given) {
  const distribute::StrategyEntry* entry = distribute::strategy_entry(spec);
  if (entry == nullptr) return;  // make_strategy names the mistake
  for (const auto& [flag, set] : given) {
    if (!set || std::ranges::find(entry->flags, flag) != entry->flags.end()) continue;
    std::string readers;
    for (const distribute::StrategyEntry& e : distribute::strategy_entries())
      if (std::ranges::find(e.flags, flag) != e.flags.end()) readers += (readers.empty() ? "" : ", ") + e.grammar;
    fail("fit: --{} applies to --strategy {}, not \"{}\"", flag, readers, spec);
  }
}

}  // namespace tandem::cli
