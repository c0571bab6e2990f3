// Strategies by name (make_strategy: "mirrored:2:deterministic", "multiworker:4:2", ...) and the
// workers' comparison of their settings before training (check_workers_agree).
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tandem/collectives/mpi.h"
#include "tandem/distribute/local_sgd.h"
#include "tandem/distribute/model_parallel.h"
#include "tandem/distribute/multi_worker.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/pipeline.h"
#include "tandem/distribute/strategy.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

namespace {
// A count in a strategy's name: a number from 1 to `most`, else nullopt.
std::optional<int> count_in_name(const std::string& n, int most) {
  if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos || std::stoi(n) < 1 ||
      std::stoi(n) > most)
    return std::nullopt;
  return std::stoi(n);
}

// "a:b:c" -> {"a", "b", "c"}.
std::vector<std::string> parts_of(const std::string& spec) {
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    size_t colon = spec.find(':', at);
    parts.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) return parts;
    at = colon + 1;
  }
}

// pipeline:S[:M][:gpipe|:1f1b] (`spec` without "pipeline:") as options, or the reason it is not.
std::variant<PipelineOptions, std::string> pipeline_options(const std::string& spec, int data_replicas,
                                                            int threads_per_replica) {
  std::vector<std::string> parts = parts_of(spec);
  PipelineOptions options;
  options.data_replicas = data_replicas;
  if (!parts.empty() && (parts.back() == "gpipe" || parts.back() == "1f1b")) {
    options.schedule = parts.back() == "gpipe" ? PipelineSchedule::GPipe : PipelineSchedule::OneForwardOneBackward;
    parts.pop_back();
  }
  if (parts.empty() || parts.size() > 2) return std::string("pipeline takes pipeline:S[:M][:gpipe|:1f1b]");
  std::optional<int> stages = count_in_name(parts[0], kMaxThreads);
  if (!stages) return fmt::format("the stage count \"{}\" is not a number from 1 to {}", parts[0], kMaxThreads);
  options.num_stages = *stages;
  if (parts.size() == 2) {
    std::optional<int> micro = count_in_name(parts[1], 1000000);
    if (!micro) return fmt::format("the micro-batch count \"{}\" is not a number from 1 to 1000000", parts[1]);
    options.micro_batches = *micro;
  }
  options.threads_per_stage =
      threads_per_replica > 0 ? threads_per_replica : std::max(1, usable_cores() / (*stages * data_replicas));
  return options;
}
}  // namespace

void check_workers_agree(Strategy& strategy, const std::string& what, const std::string& text) {
  Communicator* workers = strategy.worker_communicator();
  if (workers == nullptr || workers->size() == 1) return;
  auto n = static_cast<size_t>(workers->size());
  std::vector<int64_t> lengths(n);
  auto length = static_cast<int64_t>(text.size());
  workers->all_gather(&length, 1, lengths.data(), DataType::Int64);
  int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> mine(static_cast<size_t>(longest + 7) / 8, 0), all(mine.size() * n);
  std::memcpy(mine.data(), text.data(), text.size());
  workers->all_gather(mine.data(), static_cast<int64_t>(mine.size()), all.data(), DataType::Int64);
  auto text_of = [&](size_t w) {
    return std::string(reinterpret_cast<const char*>(all.data() + w * mine.size()), static_cast<size_t>(lengths[w]));
  };
  for (size_t w = 1; w < n; ++w)
    if (text_of(w) != text_of(0))
      fail("{}: workers disagree on {}: worker 0 (host {}) has {}, worker {} (host {}) has {}", strategy.name(), what,
           mpi_host_of(0), text_of(0), w, mpi_host_of(static_cast<int>(w)), text_of(w));
}

std::unique_ptr<Strategy> make_strategy(const std::string& spec, int threads_per_replica) {
  StrategySettings settings;
  settings.threads_per_replica = threads_per_replica;
  return make_strategy(spec, settings);
}

std::unique_ptr<Strategy> make_strategy(const std::string& spec, const StrategySettings& settings) {
  int threads_per_replica = settings.threads_per_replica;
  auto bad = [&](const std::string& why) -> std::unique_ptr<Strategy> {
    fail(
        "strategy \"{}\": {}; expected default, one_device, mirrored[:N[:deterministic]], "
        "central[:N[:deterministic]], local_sgd[:N[:K]], multiworker[:W[:L]][:deterministic][:zero], ps-async, "
        "ps-sync, "
        "ps-ssp:S, "
        "model-parallel:N, pipeline:S[:M][:gpipe|:1f1b], or mirrored:D+ either of the last two",
        spec, why);
  };
  if (spec == "default") return std::make_unique<DefaultStrategy>();
  if (spec == "one_device") return std::make_unique<OneDeviceStrategy>();
  std::vector<std::string> parts = parts_of(spec);
  if (parts[0] == "one_device" || parts[0] == "default")
    return bad("\"" + parts[0] + "\" takes no replica count or options");
  if (parts[0] == "ps-async" || parts[0] == "ps-sync" || parts[0] == "ps-ssp") {
    bool ssp = parts[0] == "ps-ssp", sync = parts[0] == "ps-sync";
    if (parts.size() > (ssp || sync ? 2 : 1) || (ssp && parts.size() < 2))
      return bad(
          ssp    ? "ps-ssp takes its staleness bound, ps-ssp:S (its tasks come from TF_CONFIG or --cluster)"
          : sync ? "ps-sync takes at most its backup workers, ps-sync:B (its tasks come from TF_CONFIG or --cluster)"
                 : "ps-async takes no counts: its tasks come from TF_CONFIG or --cluster");
    std::optional<int> backups;
    if (sync && parts.size() == 2 && !(backups = count_in_name(parts[1], 1000000)) && parts[1] != "0")
      return bad("ps-sync:B takes a number of backup workers B of 0 or more");
    std::optional<int> bound;
    if (ssp && !(bound = count_in_name(parts[1], 1000000)) && parts[1] != "0")
      return bad("ps-ssp:S takes a staleness bound S of 0 or more");
    ClusterSpec cluster =
        settings.cluster_file.empty() ? ClusterSpec::from_environment() : ClusterSpec::from_file(settings.cluster_file);
    ParameterServerOptions options;
    options.mode = parts[0] == "ps-sync" ? PsMode::Synchronous : PsMode::Asynchronous;
    options.timeout = settings.timeout;
    options.prefetch = settings.prefetch;
    options.auth_dir = settings.auth_dir;
    options.insecure = settings.insecure;
    options.record = settings.ps_record;
    options.replay = settings.ps_replay;
    options.min_workers = settings.ps_min_workers;
    if (ssp) options.max_staleness = bound.value_or(0);
    if (sync) options.backup_workers = backups.value_or(0);
    if (settings.shard_bytes > 0)
      options.partitioner = Partitioner::min_size(settings.shard_bytes, cluster.count("ps"));
    return std::make_unique<ParameterServerStrategy>(cluster, options);
  }
  // The processes a launcher started, one device each (a model split over them).
  auto launched_world = [&]() -> std::shared_ptr<Communicator> {
    if (!mpi_built()) fail("strategy \"{}\": this Tandem was built without MPI (install libopenmpi-dev)", spec);
    return make_mpi_world_communicator({.timeout = settings.timeout, .on_failure = settings.on_failure});
  };
  // model-parallel:T over D copies: on this process's cores, or one device per launched process.
  auto model_parallel = [&](int t, int d) -> std::unique_ptr<Strategy> {
    ModelParallelOptions options{
        .num_shards = t,
        .threads_per_shard = threads_per_replica > 0 ? threads_per_replica : std::max(1, usable_cores() / (d * t)),
        .data_replicas = d,
        .device_memory_bytes = settings.device_memory_bytes};
    if (started_by_mpi_launcher()) {
      options.processes = launched_world();
      if (threads_per_replica <= 0)
        options.threads_per_shard = std::max(1, usable_cores() / std::max(1, options.processes->local_size()));
    }
    return std::make_unique<ModelParallelStrategy>(std::move(options));
  };
  auto pipeline = [&](const std::string& rest, int data_replicas) -> std::unique_ptr<Strategy> {
    auto parsed = pipeline_options(rest, data_replicas, threads_per_replica);
    if (auto* why = std::get_if<std::string>(&parsed)) return bad(*why);
    PipelineOptions options = std::get<PipelineOptions>(parsed);
    if (started_by_mpi_launcher()) {  // one stage per process
      options.processes = launched_world();
      if (threads_per_replica <= 0)
        options.threads_per_stage = std::max(1, usable_cores() / std::max(1, options.processes->local_size()));
    }
    return std::make_unique<PipelineStrategy>(std::move(options));
  };
  if (parts[0] == "pipeline") return pipeline(spec.size() > 9 ? spec.substr(9) : "", 1);
  if (auto plus = spec.find('+'); plus != std::string::npos) {  // data × model: mirrored:D+model-parallel:T
    std::string data = spec.substr(0, plus), model = spec.substr(plus + 1);
    std::optional<int> d = data.starts_with("mirrored:") ? count_in_name(data.substr(9), kMaxThreads) : std::nullopt;
    if (d && model.starts_with("pipeline:")) return pipeline(model.substr(9), *d);
    std::optional<int> t =
        model.starts_with("model-parallel:") ? count_in_name(model.substr(15), kMaxThreads) : std::nullopt;
    if (!d || !t)
      return bad(
          "data × model is mirrored:D+model-parallel:T or mirrored:D+pipeline:S[:M] (D copies of the model split T "
          "ways or cut into S stages)");
    return model_parallel(*t, *d);
  }
  if (parts[0] == "model-parallel") {
    if (parts.size() != 2) return bad("model-parallel takes the number of devices to split over: model-parallel:N");
    std::optional<int> n = count_in_name(parts[1], kMaxThreads);
    if (!n) return bad(fmt::format("the device count \"{}\" is not a number from 1 to {}", parts[1], kMaxThreads));
    return model_parallel(*n, 1);
  }
  if (parts[0] == "multiworker") {
    MultiWorkerOptions options;
    options.threads_per_replica = threads_per_replica;
    options.bucket_bytes = settings.bucket_bytes;
    options.cycle_time = settings.cycle_time;
    options.compression = settings.compression;
    options.timeout = settings.timeout;
    options.on_failure = settings.on_failure;
    while (parts.size() > 1 && (parts.back() == "deterministic" || parts.back() == "zero")) {
      (parts.back() == "zero" ? options.zero : options.deterministic) = true;
      parts.pop_back();
    }
    if (parts.size() > 3) return bad("too many parts");
    for (size_t i = 1; i < parts.size(); ++i) {
      std::optional<int> n = count_in_name(parts[i], kMaxThreads);
      if (!n)
        return bad(fmt::format("the {} count \"{}\" is not a number from 1 to {}", i == 1 ? "worker" : "local replica",
                               parts[i], kMaxThreads));
      (i == 1 ? options.num_workers : options.local_replicas) = *n;
    }
    return std::make_unique<MultiWorkerMirroredStrategy>(options);
  }
  if (parts[0] != "mirrored" && parts[0] != "central" && parts[0] != "local_sgd")
    return bad("unknown strategy \"" + parts[0] + "\"");
  if (parts.size() > 3) return bad("too many parts");
  int replicas = 0;
  if (parts.size() > 1) {
    std::optional<int> n = count_in_name(parts[1], kMaxThreads);
    if (!n) return bad(fmt::format("the replica count \"{}\" is not a number from 1 to {}", parts[1], kMaxThreads));
    replicas = *n;
  }
  if (parts[0] == "local_sgd") {
    LocalSgdOptions options{.num_replicas = replicas, .threads_per_replica = threads_per_replica};
    if (parts.size() > 2) {
      std::optional<int> k = count_in_name(parts[2], 999999);
      if (!k) return bad(fmt::format("the steps between averages \"{}\" is not a number from 1 to 999999", parts[2]));
      options.sync_every = *k;
    }
    return std::make_unique<LocalSgdStrategy>(options);
  }
  MirroredOptions options{.num_replicas = replicas, .threads_per_replica = threads_per_replica};
  options.bucket_bytes = settings.bucket_bytes;
  options.cycle_time = settings.cycle_time;
  options.compression = settings.compression;
  if (parts.size() > 2) {
    if (parts[2] != "deterministic") return bad("unknown option \"" + parts[2] + "\"");
    options.deterministic = true;
  }
  if (parts[0] == "central") return std::make_unique<CentralStorageStrategy>(options);
  return std::make_unique<MirroredStrategy>(options);
}

}  // namespace tandem::distribute
