#pragma once
// A cluster spec from a Slurm job step, as TensorFlow's SlurmClusterResolver derives it: the
// step's nodes (SLURM_STEP_NODELIST) and tasks on each (SLURM_STEP_TASKS_PER_NODE) give one
// "node:port" per task, ports from `port_base` up on each node; the tasks, in rank order, go to
// the jobs in the order of their names (chief, ps, worker), and SLURM_PROCID says which task this
// process is. Two things differ from TensorFlow's, both where its result would be wrong: the nodes
// keep Slurm's order (TensorFlow sorts the names as text, so n10 before n9, which is not where
// Slurm placed ranks 0 and 1), and a node without GPUs still runs its tasks (TensorFlow's gives it
// none). A rank Slurm placed on another node than that order says (srun --distribution=cyclic) is
// an Error naming both, not a cluster whose addresses point at the wrong processes.
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/distribute/cluster.h"

namespace tandem::distribute {

struct SlurmOptions {
  // Job name and number of tasks, e.g. {{"chief", 1}, {"worker", 2}, {"ps", 1}}; empty: every task
  // a worker. The counts add up to the step's tasks.
  std::vector<std::pair<std::string, int>> jobs;
  int port_base = 8888;
  // GPUs on each node (default: SLURM_STEP_GPUS or SLURM_JOB_GPUS counted, else the node's
  // /dev/nvidiaN devices) and per task (default: those of a node over its most tasks).
  std::optional<int> gpus_per_node, gpus_per_task;
  // Tasks on each node, in place of SLURM_STEP_TASKS_PER_NODE: one count for every node, or a
  // count per node name (every node of the step named once).
  std::optional<int> tasks_per_node;
  std::vector<std::pair<std::string, int>> tasks_per_node_by_name;
  // For the caller: set CUDA_VISIBLE_DEVICES to the task's GPUs (where it has any).
  bool auto_set_gpu = true;
};

struct SlurmCluster {
  ClusterSpec spec;  // with this process's task
  int rank = 0;
  // This task's GPUs, as CUDA_VISIBLE_DEVICES lists them ("0,1"; "" where the node has none).
  std::string gpus;
};

// `lookup` reads an environment variable (nullptr: not set); the process's own by default.
SlurmCluster slurm_cluster(const SlurmOptions& options,
                           const std::function<const char*(const char*)>& lookup = nullptr);

// "n[1-3,05-06],m7" → n1 n2 n3 n05 n06 m7 (zero padding kept, brackets nested in one name allowed:
// "r[1-2]n[1-2]" → r1n1 r1n2 r2n1 r2n2); an Error naming the list where it is malformed.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);
// "2(x3),1" → 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(const std::string& text);

// The command line's form, "chief=1,worker=2,ps=1,port_base=8888,gpus_per_node=0,gpus_per_task=0,
// tasks_per_node=2,auto_set_gpu=0" (any of them; no job named: every task a worker).
SlurmOptions parse_slurm_options(const std::string& text);

}  // namespace tandem::distribute
