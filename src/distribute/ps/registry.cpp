// The parameter-server room's strategies by name (strategy_registry.h): ps-async, ps-sync[:B],
// ps-ssp:S, on every task of a cluster (TF_CONFIG or a cluster file).
#include "distribute/strategy_words.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/error.h"

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
  ParameterServerOptions options = settings.ps;
  options.mode = sync ? PsMode::Synchronous : PsMode::Asynchronous;
  if (ssp) options.max_staleness = bound.value_or(0);
  if (sync) options.backup_workers = backups.value_or(0);
  return make_parameter_servers(std::move(options), settings);
}

// A compare row, "ps-sync:1x3:1": P servers and W workers for `tandem launch --ps P --workers W`,
// then the fit's name without them ("ps-sync:1"). `row_grammar` is the row's ("ps-sync:PxW[:B]");
// the third word is optional (B), required (S) or none.
LaunchPlan launch_servers(const std::string& row, const char* row_grammar, int third_words_min, int third_words_max) {
  std::vector<std::string> words = words_of(row);
  auto size = static_cast<int>(words.size());
  if (size > 2 + third_words_max || (third_words_min > 0 && size < 2 + third_words_min))
    fail("\"{}\": expected {}", row, row_grammar);
  size_t x = size >= 2 ? words[1].find('x') : std::string::npos;
  std::string servers = x != std::string::npos ? words[1].substr(0, x) : "",
              workers = x != std::string::npos ? words[1].substr(x + 1) : "";
  if (!count_in_name(servers, 9999) || !count_in_name(workers, 9999))
    fail("\"{}\": name the servers and workers to launch, e.g. {}:1x3", row, words[0]);
  return {{"--ps", servers, "--workers", workers},
          size == 3 ? words[0] + ":" + words[2] : words[0],
          *count_in_name(workers, 9999)};
}

// `row_grammar`: how compare names it with its tasks; `third`: how many words may follow them (min, max).
StrategyEntry entry(const char* name, const char* grammar, const char* row_grammar, std::pair<int, int> third,
                    const char* help, CompareRole role = CompareRole::None) {
  return {.name = name,
          .grammar = grammar,
          .help = help,
          .family = StrategyFamily::ParameterServer,
          .needs_launcher = true,
          .flags = {"cluster", "shard-mb", "prefetch", "auth", "insecure", "record", "replay", "min-workers"},
          .compare_role = role,
          .launch_grammar = row_grammar,
          .launch = [row_grammar, third](
                        const std::string& row) { return launch_servers(row, row_grammar, third.first, third.second); },
          .make = [](const std::string& spec, const std::vector<std::string>& words, int,
                     const StrategySettings& settings) { return parameter_servers(spec, words, settings); }};
}

}  // namespace

std::unique_ptr<Strategy> make_parameter_servers(ParameterServerOptions options, const StrategySettings& settings) {
  ClusterSpec cluster = !settings.cluster_json.empty()  ? ClusterSpec::parse(settings.cluster_json, "cluster_resolver")
                        : settings.cluster_file.empty() ? ClusterSpec::from_environment()
                                                        : ClusterSpec::from_file(settings.cluster_file);
  options.timeout = settings.timeout;
  if (settings.shard_bytes > 0) options.partitioner = Partitioner::min_size(settings.shard_bytes, cluster.count("ps"));
  return std::make_unique<ParameterServerStrategy>(cluster, options);
}

void add_parameter_server_strategies(std::vector<StrategyEntry>& entries) {
  entries.push_back(entry("ps-async", "ps-async", "ps-async:PxW", {0, 0},
                          "a parameter-server cluster, each worker's gradients applied at once",
                          CompareRole::AsynchronousUpdates));
  entries.push_back(entry("ps-sync", "ps-sync[:B]", "ps-sync:PxW[:B]", {0, 1},
                          "a parameter-server cluster in synchronous rounds; B backup workers: each round applies the "
                          "first W - B gradients",
                          CompareRole::SynchronousUpdates));
  entries.push_back(
      entry("ps-ssp", "ps-ssp:S", "ps-ssp:PxW:S", {1, 1},
            "a parameter-server cluster, asynchronous, no worker more than S steps ahead of the slowest"));
}

}  // namespace tandem::distribute
