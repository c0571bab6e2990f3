#pragma once
// tandem fit --timeline: each worker's trace file, started before training (so that an unwritable
// path fails at once) and written after it, with the step's split of time said.
#include <memory>
#include <string>

#include "tandem/distribute/strategy.h"
#include "tandem/timeline.h"

namespace tandem::cli {

// Records the strategy's spans from now into a timeline whose file is `path` (one process), else
// `path` with ".rank<R>" before its extension.
std::unique_ptr<Timeline> start_timeline(distribute::Strategy& strategy, const std::string& path);
// Stops recording, writes the file and, unless verbose is 0, says where it went and how much of the
// all-reduce the backward pass hid.
void finish_timeline(distribute::Strategy& strategy, Timeline& timeline, const std::string& path, int verbose);

}  // namespace tandem::cli
