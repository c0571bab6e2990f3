#pragma once
// What ParameterServerStrategy keeps of its task's links, and of an in-process cluster
// (ClusterSpec::local): its server and worker tasks as threads of the chief's process, each with
// the links a task of a launched cluster has, over one ZeroMQ context (inproc endpoints). Started
// by each fit's make_step, ended with its runner.
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "distribute/ps/cluster_link.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/step_runner.h"
#include "tandem/distribute/train_step.h"

namespace tandem::distribute {

namespace ps {
// A server or worker task's part until the chief ends the job (ParameterServerExtended::serve, and
// each thread of an in-process cluster): `server_optimizer`, a fresh copy of the model's, for a server.
void serve_task(ClusterLink& link, const ParameterServerOptions& options, const StepParts& parts,
                std::unique_ptr<Optimizer> server_optimizer);
}  // namespace ps

struct ParameterServerExtended::Links {
  std::unique_ptr<ps::ClusterLink> link;
};

struct ParameterServerExtended::LocalTasks {
  std::shared_ptr<zmq::context_t> context = std::make_shared<zmq::context_t>(1);
  // Each worker's copy of the model and its own reader of fit's tensors (the rows read in place).
  std::vector<std::shared_ptr<ModelReplicas>> models;
  std::vector<BatchAt> batches;
  std::vector<std::unique_ptr<Optimizer>> server_optimizers;  // cloned on the chief's thread
  std::vector<std::thread> threads;
  uint64_t generation = 0;
};

}  // namespace tandem::distribute
