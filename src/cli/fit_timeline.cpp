// tandem fit --timeline's files (fit_timeline.h).
#include "cli/fit_timeline.h"

#include <cstdio>
#include <filesystem>

#include "tandem/io.h"

namespace tandem::cli {
namespace {

// Each worker's timeline file: `path` itself with one process, else with ".rank<R>" before its extension.
std::string timeline_file(distribute::Strategy& strategy, const std::string& path) {
  const distribute::Communicator* workers = strategy.extended().worker_communicator();
  if (workers == nullptr || workers->size() == 1) return path;
  std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.rank{}{}", p.stem().string(), workers->rank(), p.extension().string()))
      .string();
}

}  // namespace

std::unique_ptr<Timeline> start_timeline(distribute::Strategy& strategy, const std::string& path) {
  distribute::Communicator* workers = strategy.extended().worker_communicator();
  int rank = workers != nullptr ? workers->rank() : 0;
  auto timeline = std::make_unique<Timeline>(rank, fmt::format("rank {}", rank));
  io::write_file_atomically(timeline_file(strategy, path), "");  // writable now, not after training
  strategy.extended().set_timeline(timeline.get());
  return timeline;
}

// The time the step waited for reductions against the time they took on the communication thread.
void finish_timeline(distribute::Strategy& strategy, Timeline& timeline, const std::string& path, int verbose) {
  strategy.extended().set_timeline(nullptr);
  std::string file = timeline_file(strategy, path);
  timeline.write(file);
  if (verbose == 0) return;
  auto totals = timeline.totals();
  auto seconds = [&](const char* name) { return totals.count(name) ? totals[name].seconds : 0.0; };
  int64_t steps = totals.count("update") ? totals["update"].count : 0;
  std::printf("Timeline: %s (open it in chrome://tracing or https://ui.perfetto.dev)%s\n", file.c_str(),
              file == path ? "" : "; one file per worker");
  double reduce = seconds("all_reduce"), wait = seconds("wait");
  if (steps > 0 && reduce > 0)
    std::printf(
        "  per step: forward %.2f ms, backward %.2f ms, all-reduce %.2f ms (%.0f%% hidden behind backward), "
        "update %.2f ms\n",
        1e3 * seconds("forward") / static_cast<double>(steps), 1e3 * seconds("backward") / static_cast<double>(steps),
        1e3 * reduce / static_cast<double>(steps), 100.0 * hidden_fraction(totals),
        1e3 * seconds("update") / static_cast<double>(steps));
}

}  // namespace tandem::cli
