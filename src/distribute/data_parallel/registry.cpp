// The data-parallel room's strategies by name (strategy_registry.h): default, one_device,
// mirrored, central, local_sgd, multiworker.
#include <string_view>

#include "distribute/strategy_words.h"
#include "tandem/distribute/local_sgd.h"
#include "tandem/distribute/multi_worker.h"
#include "tandem/runtime.h"

namespace tandem::distribute {
namespace {

StrategyEntry single(const char* name, const char* help, std::unique_ptr<Strategy> (*make)(),
                     CompareRole role = CompareRole::None) {
  return {.name = name,
          .grammar = name,
          .help = help,
          .family = StrategyFamily::OneDevice,
          .compare_role = role,
          .make = [make](const std::string& spec, const std::vector<std::string>& words, int,
                         const StrategySettings&) -> std::unique_ptr<Strategy> {
            if (words.size() > 1) bad_strategy(spec, "\"" + words[0] + "\" takes no replica count or options");
            return make();
          }};
}

// mirrored, central and local_sgd: [:N[:...]] replicas of this process.
std::unique_ptr<Strategy> replicated(const std::string& spec, const std::vector<std::string>& words,
                                     const StrategySettings& settings) {
  if (words.size() > 3) bad_strategy(spec, "too many parts");
  int replicas = 0;
  if (words.size() > 1) {
    std::optional<int> n = count_in_name(words[1], kMaxThreads);
    if (!n)
      bad_strategy(spec, fmt::format("the replica count \"{}\" is not a number from 1 to {}", words[1], kMaxThreads));
    replicas = *n;
    refuse_past_cores(spec, replicas, "replicas");
  }
  if (words[0] == "local_sgd") {
    LocalSgdOptions options{.num_replicas = replicas, .threads_per_replica = settings.threads_per_replica};
    if (words.size() > 2) {
      std::optional<int> k = count_in_name(words[2], 999999);
      if (!k)
        bad_strategy(spec, fmt::format("the steps between averages \"{}\" is not a number from 1 to 999999", words[2]));
      options.sync_every = *k;
    }
    return std::make_unique<LocalSgdStrategy>(options);
  }
  MirroredOptions options{.num_replicas = replicas};
  if (words.size() > 2) {
    if (words[2] != "deterministic") bad_strategy(spec, "unknown option \"" + words[2] + "\"");
    options.deterministic = true;
  }
  return make_mirrored(options, words[0] == "central", settings);
}

std::unique_ptr<Strategy> multiworker(const std::string& spec, std::vector<std::string> words,
                                      const StrategySettings& settings) {
  MultiWorkerOptions options;
  while (words.size() > 1 && (words.back() == "deterministic" || words.back() == "zero")) {
    (words.back() == "zero" ? options.zero : options.deterministic) = true;
    words.pop_back();
  }
  if (words.size() > 3) bad_strategy(spec, "too many parts");
  for (size_t i = 1; i < words.size(); ++i) {
    std::optional<int> n = count_in_name(words[i], kMaxThreads);
    if (!n)
      bad_strategy(spec, fmt::format("the {} count \"{}\" is not a number from 1 to {}",
                                     i == 1 ? "worker" : "local replica", words[i], kMaxThreads));
    (i == 1 ? options.num_workers : options.local_replicas) = *n;
  }
  refuse_past_cores(spec, options.local_replicas, "replicas in each worker");
  return make_multiworker(std::move(options), settings);
}

// Tensor fusion and compression: what the replicas' gradient reduction reads.
const std::vector<std::string> kFusionFlags{"fusion-mb", "cycle-time-ms", "compression"};
std::vector<std::string> with_insecure(std::vector<std::string> flags) {  // processes on several machines
  flags.push_back("insecure");
  return flags;
}

StrategyEntry replicated_entry(const char* name, const char* grammar, const char* help,
                               CompareRole role = CompareRole::None) {
  return {.name = name,
          .grammar = grammar,
          .help = help,
          .flags = std::string_view(name) == "local_sgd" ? std::vector<std::string>{} : kFusionFlags,
          .compare_role = role,
          .make = [](const std::string& spec, const std::vector<std::string>& words, int,
                     const StrategySettings& settings) { return replicated(spec, words, settings); }};
}

}  // namespace

std::unique_ptr<Strategy> make_mirrored(MirroredOptions options, bool central, const StrategySettings& settings) {
  DataParallelSettings fusion = settings.of<DataParallelSettings>();
  options.threads_per_replica = settings.threads_per_replica;
  options.bucket_bytes = fusion.bucket_bytes;
  options.cycle_time = fusion.cycle_time;
  options.compression = fusion.compression;
  if (!fusion.devices.empty()) {  // a replica per device, the first num_replicas of them (0: all)
    size_t n = options.num_replicas > 0 ? static_cast<size_t>(options.num_replicas) : fusion.devices.size();
    if (n > fusion.devices.size())
      fail("{}:{}: {} replicas, a device each, on the {} device{} given ({}...)", central ? "central" : "mirrored", n,
           n, fusion.devices.size(), fusion.devices.size() == 1 ? "" : "s", fusion.devices[0].name());
    options.devices.assign(fusion.devices.begin(), fusion.devices.begin() + static_cast<std::ptrdiff_t>(n));
    options.num_replicas = 0;
  }
  if (central) return std::make_unique<CentralStorageStrategy>(options);
  return std::make_unique<MirroredStrategy>(options);
}

std::unique_ptr<Strategy> make_multiworker(MultiWorkerOptions options, const StrategySettings& settings) {
  DataParallelSettings fusion = settings.of<DataParallelSettings>();
  options.threads_per_replica = settings.threads_per_replica;
  options.bucket_bytes = fusion.bucket_bytes;
  options.cycle_time = fusion.cycle_time;
  options.compression = fusion.compression;
  options.timeout = settings.timeout;
  options.on_failure = settings.on_failure;
  options.insecure = settings.insecure;
  return std::make_unique<MultiWorkerMirroredStrategy>(std::move(options));
}

void add_data_parallel_strategies(std::vector<StrategyEntry>& entries) {
  entries.push_back(single(
      "default", "the model as it is, on this thread's cores",
      [] { return std::unique_ptr<Strategy>(std::make_unique<DefaultStrategy>()); }, CompareRole::OneDevice));
  entries.push_back(single("one_device", "one replica, with a strategy's scope and run",
                           [] { return std::unique_ptr<Strategy>(std::make_unique<OneDeviceStrategy>()); }));
  entries.push_back(replicated_entry(
      "mirrored", "mirrored[:N[:deterministic]]",
      "N replicas on this machine's cores (default one per core), gradients all-reduced; deterministic: the same "
      "bits for any N",
      CompareRole::DataSplit));
  entries.push_back(replicated_entry("central", "central[:N[:deterministic]]",
                                     "N replicas computing on one copy of the variables, updated once"));
  entries.push_back(replicated_entry("local_sgd", "local_sgd[:N[:K]]",
                                     "N replicas stepping alone, their weights averaged every K steps (default 4)"));
  entries.push_back({.name = "multiworker",
                     .grammar = "multiworker[:W[:L]][:deterministic][:zero]",
                     .help = "W worker processes under `tandem launch` with L replicas each; zero: each worker keeps "
                             "1/W of the optimizer's state (ZeRO stage 1)",
                     .needs_launcher = true,
                     .flags = with_insecure(kFusionFlags),
                     .launch_grammar = "multiworker:W[:L][:deterministic][:zero]",
                     .launch =
                         [](const std::string& row) {
                           // multiworker:W...: W processes of `tandem launch -np W`, each fit given the row's name.
                           std::vector<std::string> words = words_of(row);
                           if (words.size() < 2 || !count_in_name(words[1], 9999))
                             fail("\"{}\": name the workers to launch, e.g. multiworker:2", row);
                           return LaunchPlan{{"-np", words[1]}, row};
                         },
                     .make = [](const std::string& spec, const std::vector<std::string>& words, int,
                                const StrategySettings& settings) { return multiworker(spec, words, settings); }});
}

}  // namespace tandem::distribute
