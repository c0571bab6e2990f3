// The cluster spec a Slurm job step gives (tandem/distribute/slurm.h), from environments written
// here as Slurm writes them; the jobs under a real Slurm are tests/python/test_slurm.py's.
#include "tandem/distribute/slurm.h"

#include <gtest/gtest.h>

#include <map>

#include "test_util.h"

namespace tandem::testing {
namespace {

using namespace distribute;

std::function<const char*(const char*)> environment(const std::map<std::string, std::string>& vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(vars);
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

// A step of 4 tasks on three nodes, two on the first, as `srun -n 4` over tsl-[1-3] places them.
std::map<std::string, std::string> step(int rank) {
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_STEP_NODELIST", "tsl-[1-3]"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_TASKS_PER_NODE", "2,1(x2)"},
          {"SLURM_STEP_GPUS", ""}};
}

TEST(Slurm, ExpandsHostListsAsSlurmWritesThem) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_hostlist("n1"), V{"n1"});
  EXPECT_EQ(expand_slurm_hostlist("n[1-3,5],m7"), (V{"n1", "n2", "n3", "n5", "m7"}));
  EXPECT_EQ(expand_slurm_hostlist("n[09-11]"), (V{"n09", "n10", "n11"}));
  EXPECT_EQ(expand_slurm_hostlist("r[1-2]n[1-2]"), (V{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expand_slurm_hostlist("gpu-a[3],x"), (V{"gpu-a3", "x"}));
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  for (const char* broken : {"n[1-", "n1]", "n[3-1]", "n[a-b]", "n[1-2],,m", "", "n[]"})
    expect_error([&] { expand_slurm_hostlist(broken); }, fmt::format("(\"{}\")", broken));
  expect_error([] { expand_slurm_hostlist("a[0-99999]"); }, "more than 65536 names");
  expect_error([] { expand_slurm_hostlist("n1,n 2"); }, "node name \"n 2\" holds ' '");
  expect_error([] { expand_slurm_hostlist("n\xff[1-2]"); }, "node name \"n\\xff1\" holds byte 0xff");
  expect_error([] { expand_slurm_hostlist("a[0-999]b[0-999]"); }, "more than 65536 names");
  for (const char* broken : {"2(x3", "x", "2(x0)", "-1", "2,,1", "1(x70000)"})
    expect_error([&] { expand_slurm_tasks_per_node(broken); }, fmt::format("(\"{}\")", broken));
}

TEST(Slurm, GivesEachTaskARoleAsTensorFlowsResolverDoes) {
  SlurmOptions options;
  options.jobs = {{"worker", 2}, {"ps", 1}, {"chief", 1}};
  // The jobs in their names' order take the ranks: chief 0, ps 1, workers 2 and 3.
  const char* roles[] = {"chief:0", "ps:0", "worker:0", "worker:1"};
  for (int rank = 0; rank < 4; ++rank) {
    SlurmCluster got = slurm_cluster(options, environment(step(rank)));
    EXPECT_EQ(got.rank, rank);
    EXPECT_EQ(got.spec.task().str(), roles[rank]);
    EXPECT_EQ(got.spec.tasks("chief"), std::vector<std::string>{"tsl-1:8888"});
    EXPECT_EQ(got.spec.tasks("ps"), std::vector<std::string>{"tsl-1:8889"});
    EXPECT_EQ(got.spec.tasks("worker"), (std::vector<std::string>{"tsl-2:8888", "tsl-3:8888"}));
    EXPECT_EQ(got.gpus, "");
  }
  // No jobs named: every task a worker; another port base.
  SlurmOptions plain;
  plain.port_base = 3000;
  EXPECT_EQ(slurm_cluster(plain, environment(step(1))).spec.to_json({"worker", 1}),
            R"({"cluster":{"worker":["tsl-1:3000","tsl-1:3001","tsl-2:3000","tsl-3:3000"]},)"
            R"("task":{"index":1,"type":"worker"}})");
}

TEST(Slurm, KeepsSlurmsOrderOfNodesAndChecksWhereTheRankRuns) {
  // Slurm writes n[9-10]: rank 0 on n9 (sorting the names as text would put n10 first).
  std::map<std::string, std::string> vars = {{"SLURM_PROCID", "0"},
                                             {"SLURM_STEP_NODELIST", "n[9-10]"},
                                             {"SLURM_STEP_NUM_TASKS", "2"},
                                             {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                                             {"SLURMD_NODENAME", "n9"}};
  EXPECT_EQ(slurm_cluster({}, environment(vars)).spec.tasks("worker"),
            (std::vector<std::string>{"n9:8888", "n10:8888"}));
  vars["SLURMD_NODENAME"] = "n10";  // a cyclic distribution
  expect_error([&] { slurm_cluster({}, environment(vars)); },
               "Slurm placed rank 0 on node n10, but the nodes' order with 1,1 task(s) each puts it on n9");
  // Outside a step, or a step without its lists.
  expect_error([&] { slurm_cluster({}, environment({})); }, "SLURM_PROCID is not set");
  expect_error(
      [&] {
        slurm_cluster({}, environment({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}}));
      },
      "SLURM_STEP_NODELIST is not set");
  // The job-wide lists stand in for the step's (a batch script's own task).
  EXPECT_EQ(slurm_cluster({}, environment({{"SLURM_PROCID", "0"},
                                           {"SLURM_JOB_NODELIST", "a"},
                                           {"SLURM_NTASKS", "1"},
                                           {"SLURM_TASKS_PER_NODE", "1"}}))
                .spec.tasks("worker"),
            std::vector<std::string>{"a:8888"});
}

TEST(Slurm, NamesEveryMistakeWithTheValues) {
  SlurmOptions options;
  options.jobs = {{"worker", 2}, {"ps", 1}};
  expect_error([&] { slurm_cluster(options, environment(step(0))); },
               "jobs (ps=1, worker=2) add up to 3 tasks, but the step has 4 (SLURM_STEP_NUM_TASKS)");
  options.jobs = {{"worker", 3}, {"evaluator", 1}};
  expect_error([&] { slurm_cluster(options, environment(step(0))); }, "cluster.evaluator: unknown task type");
  auto vars = step(0);
  vars["SLURM_STEP_TASKS_PER_NODE"] = "2,1";
  expect_error([&] { slurm_cluster({}, environment(vars)); },
               "SLURM_STEP_TASKS_PER_NODE=2,1 counts tasks on 2 nodes, but SLURM_STEP_NODELIST=tsl-[1-3] has 3");
  vars = step(7);
  expect_error([&] { slurm_cluster({}, environment(vars)); },
               "SlurmClusterResolver: SLURM_PROCID: expected a whole number from 0 to 3, not \"7\"");
  SlurmOptions by_name;
  by_name.tasks_per_node_by_name = {{"tsl-1", 2}, {"tsl-2", 1}, {"tsl-9", 1}};
  expect_error([&] { slurm_cluster(by_name, environment(step(0))); },
               "tasks_per_node names no count for node \"tsl-3\"");
  by_name.tasks_per_node_by_name = {{"tsl-1", 1}, {"tsl-2", 1}, {"tsl-3", 1}};
  expect_error([&] { slurm_cluster(by_name, environment(step(0))); }, "3 tasks on its nodes, but the step has 4");
  SlurmOptions high;
  high.port_base = 65535;
  expect_error([&] { slurm_cluster(high, environment(step(0))); }, "port_base 65535 plus 2 tasks on node tsl-1");
}

TEST(Slurm, GivesEachTaskItsNodesGpus) {
  SlurmOptions options;
  options.gpus_per_node = 4;  // two tasks on tsl-1: two GPUs each
  EXPECT_EQ(slurm_cluster(options, environment(step(0))).gpus, "0,1");
  EXPECT_EQ(slurm_cluster(options, environment(step(1))).gpus, "2,3");
  EXPECT_EQ(slurm_cluster(options, environment(step(2))).gpus, "0,1");
  auto vars = step(1);
  vars["SLURM_STEP_GPUS"] = "0,1";  // Slurm's count when none is given
  EXPECT_EQ(slurm_cluster({}, environment(vars)).gpus, "1");
  options.gpus_per_task = 3;
  expect_error([&] { slurm_cluster(options, environment(step(0))); },
               "2 tasks on a node at 3 GPUs each need 6 GPUs, but a node has 4 (gpus_per_node)");
}

TEST(Slurm, ReadsTheCommandLinesForm) {
  SlurmOptions options = parse_slurm_options("chief=1,worker=2,ps=1,port_base=9000,tasks_per_node=2,gpus_per_node=0");
  EXPECT_EQ(options.jobs, (std::vector<std::pair<std::string, int>>{{"chief", 1}, {"worker", 2}, {"ps", 1}}));
  EXPECT_EQ(options.port_base, 9000);
  EXPECT_EQ(options.tasks_per_node, 2);
  EXPECT_EQ(options.gpus_per_node, 0);
  EXPECT_TRUE(parse_slurm_options("").jobs.empty());
  expect_error([] { parse_slurm_options("workers=2"); }, "unknown setting \"workers\"");
  expect_error([] { parse_slurm_options("worker"); }, "\"worker\" is not NAME=VALUE");
  expect_error([] { parse_slurm_options("port_base=70000"); }, "port_base: expected a whole number from 1 to 65535");
}

}  // namespace
}  // namespace tandem::testing
