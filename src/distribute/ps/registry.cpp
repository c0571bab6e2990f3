// The parameter-server room's strategies by name (strategy_registry.h): ps-async, ps-sync[:B],
// ps-ssp:S, on every task of a cluster (TF_CONFIG or a cluster file); or, with the servers and
// workers and ":threads" (ps-async:PxW:threads, ps-sync:PxW[:B]:threads, ps-ssp:PxW:S:threads),
// a cluster in this process.
#include <cstdlib>
#include <optional>
#include <tuple>

#include "distribute/strategy_words.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {
namespace {

// "PxW": the servers and the workers (each from 1 to 9999), or nullopt.
std::optional<std::pair<int, int>> servers_by_workers(const std::string& word) {
  size_t x = word.find('x');
  if (x == std::string::npos) return std::nullopt;
  std::optional<int> servers = count_in_name(word.substr(0, x), 9999),
                     workers = count_in_name(word.substr(x + 1), 9999);
  if (!servers || !workers) return std::nullopt;
  return std::pair{*servers, *workers};
}

std::unique_ptr<Strategy> parameter_servers(const std::string& spec, std::vector<std::string> words,
                                            StrategySettings settings) {
  if (words.size() >= 2 && words.back() == "threads") {  // an in-process cluster: ps-async:PxW[:...]:threads
    std::optional<std::pair<int, int>> tasks = words.size() >= 3 ? servers_by_workers(words[1]) : std::nullopt;
    if (!tasks)
      bad_strategy(spec, fmt::format("an in-process cluster names its servers and workers: {}:1x3:threads",
                                     words[0] == "ps-ssp" ? "ps-ssp:S" : words[0]));
    ParameterServerSettings& ps = settings.of<ParameterServerSettings>();
    ps.in_process = true;
    std::tie(ps.local_ps, ps.local_workers) = *tasks;
    words.erase(words.begin() + 1);
    words.pop_back();
  }
  bool ssp = words[0] == "ps-ssp", sync = words[0] == "ps-sync";
  if (words.size() > (ssp || sync ? 2 : 1) || (ssp && words.size() < 2))
    bad_strategy(spec, ssp ? "ps-ssp takes its staleness bound, ps-ssp:S (its tasks come from TF_CONFIG or --cluster, "
                             "or ps-ssp:PxW:S:threads in this process)"
                       : sync ? "ps-sync takes at most its backup workers, ps-sync:B (its tasks come from TF_CONFIG or "
                                "--cluster, or ps-sync:PxW[:B]:threads in this process)"
                              : "ps-async takes no counts: its tasks come from TF_CONFIG or --cluster, or "
                                "ps-async:PxW:threads in this process");
  std::optional<int> backups;
  if (sync && words.size() == 2 && !(backups = count_in_name(words[1], 1000000)) && words[1] != "0")
    bad_strategy(spec, "ps-sync:B takes a number of backup workers B of 0 or more");
  std::optional<int> bound;
  if (ssp && !(bound = count_in_name(words[1], 1000000)) && words[1] != "0")
    bad_strategy(spec, "ps-ssp:S takes a staleness bound S of 0 or more");
  ParameterServerOptions options = settings.of<ParameterServerSettings>().ps;
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
  std::optional<std::pair<int, int>> tasks = size >= 2 ? servers_by_workers(words[1]) : std::nullopt;
  if (!tasks) fail("\"{}\": name the servers and workers to launch, e.g. {}:1x3", row, words[0]);
  return {{"--ps", std::to_string(tasks->first), "--workers", std::to_string(tasks->second)},
          size == 3 ? words[0] + ":" + words[2] : words[0],
          tasks->second};
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

std::unique_ptr<Strategy> make_parameter_servers(ParameterServerOptions options, const StrategySettings& common) {
  ParameterServerSettings settings = common.of<ParameterServerSettings>();
  bool local = settings.in_process;
  if (const char* tf_config = std::getenv("TF_CONFIG"); local && tf_config != nullptr && *tf_config != '\0')
    fail(
        "ParameterServerStrategy: an in-process cluster where TF_CONFIG names a task of a cluster of processes (under "
        "`tandem launch`, each task would start a cluster of its own): drop \":threads\", or unset TF_CONFIG");
  if (local && (!settings.cluster_json.empty() || !settings.cluster_file.empty()))
    fail("ParameterServerStrategy: an in-process cluster makes its own tasks; a cluster spec ({}) is for processes",
         settings.cluster_file.empty() ? "a cluster resolver" : "--cluster " + settings.cluster_file);
  ClusterSpec cluster = local
                            ? ClusterSpec::local(settings.local_ps,
                                                 settings.local_workers == -1 ? usable_cores() : settings.local_workers)
                        : !settings.cluster_json.empty() ? ClusterSpec::parse(settings.cluster_json, "cluster_resolver")
                        : settings.cluster_file.empty()  ? ClusterSpec::from_environment()
                                                         : ClusterSpec::from_file(settings.cluster_file);
  if (local && options.threads_per_worker == 0) options.threads_per_worker = common.threads_per_replica;
  options.timeout = common.timeout;
  if (settings.shard_bytes > 0) options.partitioner = Partitioner::min_size(settings.shard_bytes, cluster.count("ps"));
  return std::make_unique<ParameterServerStrategy>(cluster, options);
}

void add_parameter_server_strategies(std::vector<StrategyEntry>& entries) {
  entries.push_back(entry("ps-async", "ps-async, ps-async:PxW:threads", "ps-async:PxW[:threads]", {0, 0},
                          "a parameter-server cluster, each worker's gradients applied at once (PxW:threads: P "
                          "servers and W workers as threads of this process)",
                          CompareRole::AsynchronousUpdates));
  entries.push_back(entry("ps-sync", "ps-sync[:B], ps-sync:PxW[:B]:threads", "ps-sync:PxW[:B][:threads]", {0, 1},
                          "a parameter-server cluster in synchronous rounds; B backup workers: each round applies the "
                          "first W - B gradients (PxW ... :threads: in this process)",
                          CompareRole::SynchronousUpdates));
  entries.push_back(
      entry("ps-ssp", "ps-ssp:S, ps-ssp:PxW:S:threads", "ps-ssp:PxW:S[:threads]", {1, 1},
            "a parameter-server cluster, asynchronous, no worker more than S steps ahead of the slowest (PxW ... "
            ":threads: in this process)"));
}

}  // namespace tandem::distribute
