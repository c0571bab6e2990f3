// The pipeline room's strategy by name (strategy_registry.h): pipeline:S[:M][:gpipe|:1f1b], and
// mirrored:D+pipeline:S[:M] (D copies of the pipeline).
#include "distribute/strategy_words.h"
#include "tandem/collectives/mpi.h"
#include "tandem/distribute/pipeline.h"
#include "tandem/runtime.h"

namespace tandem::distribute {
namespace {

std::unique_ptr<Strategy> pipeline(const std::string& spec, std::vector<std::string> words, int copies,
                                   const StrategySettings& settings) {
  words.erase(words.begin());               // "pipeline"
  if (words.empty()) words.emplace_back();  // "pipeline" alone: no stage count
  PipelineOptions options;
  options.data_replicas = copies;
  if (!words.empty() && (words.back() == "gpipe" || words.back() == "1f1b")) {
    options.schedule = words.back() == "gpipe" ? PipelineSchedule::GPipe : PipelineSchedule::OneForwardOneBackward;
    words.pop_back();
  }
  if (words.empty() || words.size() > 2) bad_strategy(spec, "pipeline takes pipeline:S[:M][:gpipe|:1f1b]");
  std::optional<int> stages = count_in_name(words[0], kMaxThreads);
  if (!stages)
    bad_strategy(spec, fmt::format("the stage count \"{}\" is not a number from 1 to {}", words[0], kMaxThreads));
  options.num_stages = *stages;
  if (words.size() == 2) {
    std::optional<int> micro = count_in_name(words[1], 1000000);
    if (!micro)
      bad_strategy(spec, fmt::format("the micro-batch count \"{}\" is not a number from 1 to 1000000", words[1]));
    options.micro_batches = *micro;
  }
  if (!started_by_mpi_launcher()) refuse_past_cores(spec, options.num_stages * copies, "stages");
  return make_pipeline(std::move(options), settings);
}

}  // namespace

std::unique_ptr<Strategy> make_pipeline(PipelineOptions options, const StrategySettings& settings) {
  int threads = settings.threads_per_replica;
  int devices = std::max(1, options.num_stages) * std::max(1, options.data_replicas);
  options.threads_per_stage = threads > 0 ? threads : std::max(1, usable_cores() / devices);
  if (started_by_mpi_launcher()) {  // one stage per process
    options.processes = launched_world(fmt::format("pipeline:{}", options.num_stages), settings);
    if (threads <= 0)
      options.threads_per_stage = std::max(1, usable_cores() / std::max(1, options.processes->local_size()));
  }
  return std::make_unique<PipelineStrategy>(std::move(options));
}

void add_pipeline_strategies(std::vector<StrategyEntry>& entries) {
  entries.push_back({.name = "pipeline",
                     .grammar = "pipeline:S[:M][:gpipe|:1f1b]",
                     .help = "the layers cut into S stages, each global batch into M micro-batches (default 4), "
                             "scheduled one forward one backward or GPipe (one stage per process under `tandem "
                             "launch -np S`)",
                     .family = StrategyFamily::Pipeline,
                     .copies = true,
                     .flags = {"insecure"},
                     .make = [](const std::string& spec, const std::vector<std::string>& words, int copies,
                                const StrategySettings& settings) { return pipeline(spec, words, copies, settings); }});
}

}  // namespace tandem::distribute
