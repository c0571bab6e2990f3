// The parameter-server room's strategies by name (strategy_registry.h): ps-async, ps-sync[:B],
// ps-ssp:S, on every task of a cluster (TF_CONFIG or a cluster file).
#include "distribute/strategy_words.h"
#include "tandem/distribute/parameter_server.h"

namespace tandem::distribute {
namespace {

std::unique_ptr<Strategy> parameter_servers(const std::string& spec, const std::vector<std::string>& words,
                                            const StrategySettings& settings) {
  bool ssp = words[0] == "ps-ssp", sync = words[0] == "ps-sync";
  if (words.size() > (ssp || sync ? 2 : 1) || (ssp && words.size() < 2))
    bad_strategy(spec, ssp ? "ps-ssp takes its staleness bound, ps-ssp:S (its tasks come from TF_CONFIG or --cluster)"
                       : sync ? "ps-sync takes at most its backup workers, ps-sync:B (its tasks come from TF_CONFIG or "
                                "--cluster)"
                              : "ps-async takes no counts: its tasks come from TF_CONFIG or --cluster");
  std::optional<int> backups;
  if (sync && words.size() == 2 && !(backups = count_in_name(words[1], 1000000)) && words[1] != "0")
    bad_strategy(spec, "ps-sync:B takes a number of backup workers B of 0 or more");
  std::optional<int> bound;
  if (ssp && !(bound = count_in_name(words[1], 1000000)) && words[1] != "0")
    bad_strategy(spec, "ps-ssp:S takes a staleness bound S of 0 or more");
  ClusterSpec cluster =
      settings.cluster_file.empty() ? ClusterSpec::from_environment() : ClusterSpec::from_file(settings.cluster_file);
  ParameterServerOptions options = settings.ps;
  options.mode = sync ? PsMode::Synchronous : PsMode::Asynchronous;
  options.timeout = settings.timeout;
  if (ssp) options.max_staleness = bound.value_or(0);
  if (sync) options.backup_workers = backups.value_or(0);
  if (settings.shard_bytes > 0) options.partitioner = Partitioner::min_size(settings.shard_bytes, cluster.count("ps"));
  return std::make_unique<ParameterServerStrategy>(cluster, options);
}

StrategyEntry entry(const char* name, const char* grammar, const char* help) {
  return {.name = name,
          .grammar = grammar,
          .help = help,
          .family = StrategyFamily::ParameterServer,
          .needs_launcher = true,
          .flags = {"cluster", "shard-mb", "prefetch", "auth", "insecure", "record", "replay", "min-workers"},
          .make = [](const std::string& spec, const std::vector<std::string>& words, int,
                     const StrategySettings& settings) { return parameter_servers(spec, words, settings); }};
}

}  // namespace

void add_parameter_server_strategies(std::vector<StrategyEntry>& entries) {
  entries.push_back(
      entry("ps-async", "ps-async", "a parameter-server cluster, each worker's gradients applied at once"));
  entries.push_back(entry("ps-sync", "ps-sync[:B]",
                          "a parameter-server cluster in synchronous rounds; B backup workers: each round applies the "
                          "first W - B gradients"));
  entries.push_back(
      entry("ps-ssp", "ps-ssp:S",
            "a parameter-server cluster, asynchronous, no worker more than S steps ahead of the slowest"));
}

}  // namespace tandem::distribute
