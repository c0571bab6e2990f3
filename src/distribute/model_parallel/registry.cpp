// The model-parallel room's strategy by name (strategy_registry.h): model-parallel:N, and
// mirrored:D+model-parallel:T (D copies of the split model).
#include "distribute/strategy_words.h"
#include "tandem/collectives/mpi.h"
#include "tandem/distribute/model_parallel.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

std::unique_ptr<Strategy> make_model_parallel(ModelParallelOptions options, const StrategySettings& settings) {
  int threads = settings.threads_per_replica;
  int devices = std::max(1, options.num_shards) * std::max(1, options.data_replicas);
  options.threads_per_shard = threads > 0 ? threads : std::max(1, usable_cores() / devices);
  options.device_memory_bytes = settings.of<ModelParallelSettings>().device_memory_bytes;
  if (started_by_mpi_launcher()) {  // one device per process
    options.processes = launched_world(fmt::format("model-parallel:{}", options.num_shards), settings);
    if (threads <= 0)
      options.threads_per_shard = std::max(1, usable_cores() / std::max(1, options.processes->local_size()));
  }
  return std::make_unique<ModelParallelStrategy>(std::move(options));
}

void add_model_parallel_strategies(std::vector<StrategyEntry>& entries) {
  entries.push_back(
      {.name = "model-parallel",
       .grammar = "model-parallel:N",
       .help = "the Dense layers split over N devices, core groups of --threads threads each (one device per process "
               "under `tandem launch -np N`)",
       .family = StrategyFamily::ModelParallel,
       .copies = true,
       .flags = {"device-memory", "insecure"},
       .make = [](const std::string& spec, const std::vector<std::string>& words, int copies,
                  const StrategySettings& settings) -> std::unique_ptr<Strategy> {
         if (words.size() != 2)
           bad_strategy(spec, copies > 1
                                  ? "data × model is mirrored:D+model-parallel:T or mirrored:D+pipeline:S[:M] "
                                    "(D copies of the model split T ways or cut into S stages)"
                                  : "model-parallel takes the number of devices to split over: model-parallel:N");
         std::optional<int> n = count_in_name(words[1], kMaxThreads);
         if (!n)
           bad_strategy(spec, copies > 1 ? "data × model is mirrored:D+model-parallel:T or mirrored:D+pipeline:S[:M] "
                                           "(D copies of the model split T ways or cut into S stages)"
                                         : fmt::format("the device count \"{}\" is not a number from 1 to {}", words[1],
                                                       kMaxThreads));
         if (!started_by_mpi_launcher()) refuse_past_cores(spec, *n * copies, "devices");
         return make_model_parallel({.num_shards = *n, .data_replicas = copies}, settings);
       }});
}

}  // namespace tandem::distribute
