#pragma once
// A worker of a parameter-server cluster: serves the chief's steps until it says stop.
#include "distribute/ps/cluster_link.h"
#include "distribute/ps/shards.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/distribute/train_step.h"

namespace tandem::distribute::ps {

void serve_as_worker(ClusterLink& link, const ParameterServerOptions& options, const StepParts& parts);

}  // namespace tandem::distribute::ps
