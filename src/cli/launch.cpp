// `tandem launch`: starts a command on several processes (and machines) through Open MPI's
// mpirun, with what a user would otherwise look up: root, oversubscription when there are more
// processes than cores, no binding (Tandem places its own threads), the single-copy setting
// containers need, the environment forwarded to other hosts. Also takes a TF_CONFIG cluster. Inside
// a Slurm allocation (SLURM_JOB_ID set) it starts the ranks with srun instead, each one wired up by
// Slurm's PMIx plugin (Open MPI's own PMIx client: Debian's Open MPI has no PMI-2 client).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include "cli/common.h"
#include "collectives/control_plane.h"
#include "tandem/distribute/cluster.h"
#include "tandem/distribute/slurm.h"

extern char** environ;

namespace tandem::cli {
namespace {

constexpr const char* kUsage =
    "usage: tandem launch [-np N] [-H host1:slots,host2:slots] [--tf-config JSON] [--network SUBNET|IFACE]\n"
    "                     [--rsh-agent PATH] [--mpirun-arg ARG]... [--launcher srun|mpirun] [--dry-run]\n"
    "                     -- COMMAND [ARGS...]\n"
    "       tandem launch --ps P --workers W [--restarts N] [--dry-run] -- COMMAND [ARGS...]\n"
    "  --network: the machines' network (10.0.0.0/24, or an interface name) for MPI's traffic\n"
    "  --launcher: inside a Slurm allocation (sbatch, salloc: SLURM_JOB_ID is set) the ranks start with\n"
    "  `srun --mpi=pmix`, -np N tasks (default: the allocation's), each its rank from Slurm; mpirun: with\n"
    "  mpirun instead (Open MPI then starts its daemons through Slurm). --mpirun-arg goes to srun there\n"
    "  --timeout: seconds a TF_CONFIG worker's machine has to start a process (checked first; 30)\n"
    "  --restarts N: a worker or parameter server that dies is started again, at most N times each\n"
    "  (3); an asynchronous job takes it back\n"
    "  e.g. tandem launch -np 2 -- tandem fit --strategy multiworker --batch-size 256\n"
    "  TF_CONFIG (the flag or the environment variable): the cluster's workers become the hosts,\n"
    "  one process each; worker 0 (or the chief) launches them all. A TF_CONFIG that lists \"ps\" tasks\n"
    "  is a parameter-server cluster: the chief's launch starts every task on its host (ssh, or\n"
    "  --rsh-agent), each COMMAND with its TF_CONFIG, and ends them all when the chief ends.\n"
    "  --ps P --workers W: a parameter-server cluster on this machine (a chief, W workers, P servers),\n"
    "  each task COMMAND with its TF_CONFIG on free loopback ports, e.g.\n"
    "  tandem launch --ps 1 --workers 3 -- tandem fit --model mlp5 --strategy ps-async --batch-size 50";

int parse_count(const std::string& text, const char* what) {
  try {
    size_t used = 0;
    long n = std::stol(text, &used);
    if (used == text.size() && n > 0 && n <= 4096) return static_cast<int>(n);
  } catch (const std::exception&) {
  }
  fail("launch: {} must be a whole number from 1 to 4096, not \"{}\"", what, text);
}

struct Cluster {
  std::vector<RemoteTask> tasks;  // every worker, in task order
  bool launches = true;           // this task starts the processes (worker 0 or the chief)
  std::string task;
};

// The form tf.distribute users write: {"cluster": {"worker": ["host:port", ...]}, "task":
// {"type": "worker", "index": 0}}, read by the library's ClusterSpec; a "chief" entry counts as
// worker 0.
Cluster parse_tf_config(const distribute::ClusterSpec& spec) {
  if (spec.count("chief") + spec.count("worker") == 0)
    fail("launch: TF_CONFIG's cluster lists no worker (cluster.worker is missing or empty)");
  spec.check_hosts();
  Cluster out;
  for (const char* type : {"chief", "worker"})
    for (int i = 0; i < spec.count(type); ++i) {
      distribute::TaskId task{type, i};
      out.tasks.push_back({task.str(), spec.address(task), spec.host(task)});
    }
  out.task = spec.task().str();
  out.launches = out.task == out.tasks.front().name;
  return out;
}

}  // namespace

bool is_this_machine(const std::string& host) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::vector<std::string> mine = distribute::detail::local_addresses();
  return host == "localhost" || host.starts_with("127.") || host == name ||
         std::find(mine.begin(), mine.end(), host) != mine.end();
}

// Before anything starts: every other machine of the cluster runs a process through the agent
// (ssh, or --rsh-agent) within the timeout, else the task that cannot start is named (mpirun
// would say only that a daemon did not start).
void check_tasks_start(const std::vector<RemoteTask>& tasks, const std::string& agent, double timeout, bool slurm) {
  std::map<std::string, bool> checked;
  for (const RemoteTask& task : tasks) {
    const std::string& host = task.host;
    if (checked[host] || (!slurm && is_this_machine(host))) continue;
    checked[host] = true;
    std::vector<std::string> args;
    if (slurm) {
      args = slurm_step_agent();
    } else if (agent.empty()) {
      args = {"ssh", "-o", "BatchMode=yes", "-o", fmt::format("ConnectTimeout={}", static_cast<int>(timeout) + 1)};
    } else {
      args.push_back(agent);
    }
    args.insert(args.end(), {host, "true"});
    std::string said;
    std::optional<int> code = run_command(args, &said, timeout);
    if (!code)
      fail(
          "launch: {} task {} (\"{}\"): no process started on host \"{}\" within {} s through `{}`; is that "
          "machine up, reachable and {}?",
          slurm ? "Slurm" : "TF_CONFIG", task.name, task.address, host, timeout, args[0],
          slurm ? "its slurmd answering (sinfo)" : "running an ssh server (or give --rsh-agent)");
    if (*code != 0)
      fail("launch: {} task {} (\"{}\"): no process could be started on host \"{}\" through `{}`{}",
           slurm ? "Slurm" : "TF_CONFIG", task.name, task.address, host, args[0],
           said.empty() ? std::string() : ": " + said);
  }
}

namespace {

// The program to start exists here, as mpirun would look it up (a path as given, else on PATH):
// mpirun itself would say only that processes failed to start.
void check_program(const std::string& program) {
  auto runnable = [](const std::string& path) { return access(path.c_str(), X_OK) == 0; };
  if (program.find('/') != std::string::npos) {
    if (runnable(program)) return;
    if (access(program.c_str(), F_OK) == 0)
      fail("launch: \"{}\" is not executable (chmod +x it, or start it through its interpreter)", program);
  } else {
    const char* path = std::getenv("PATH");
    for (const std::string& dir : split(path != nullptr ? path : "", ':'))
      if (runnable((dir.empty() ? "." : dir) + "/" + program)) return;
  }
  fail(
      "launch: no such program \"{}\" on this machine ({}); on other hosts it must exist at the same path, since "
      "every process runs the same command",
      program, program.find('/') != std::string::npos ? "no file at that path" : "not found on PATH");
}

int usable_cores_here() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace

std::vector<std::string> slurm_step_agent() {
  // One task on the node, beside the allocation's other steps (--overlap: a restarted task or the
  // start-up check may find its CPUs held by the steps still running), with this environment.
  return {"srun", "--nodes=1", "--ntasks=1", "--overlap", "--export=ALL", "--quiet", "--nodelist"};
}

namespace {

// The launcher's command: printed after `settings` (--dry-run), else run in this process's place
// (`hint` says what to do where it cannot start).
int print_or_run(std::vector<std::string> argv, const std::string& settings, bool dry_run, const std::string& hint) {
  if (dry_run) {
    std::string line = settings;
    for (size_t i = 0; i < argv.size(); ++i) line += (i == 0 ? "" : " ") + argv[i];
    std::puts(line.c_str());
    return 0;
  }
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::fflush(stdout);
  execvp(argv[0].c_str(), raw.data());
  fail("launch: cannot start {} ({}): {}", argv[0], std::strerror(errno), hint);
}

// A parameter-server cluster over this Slurm allocation's tasks: the chief, the servers, then the
// workers, in rank order over the allocation's nodes as SlurmClusterResolver gives them (the
// batch step's own lists are its one task's; the allocation's are the job's).
distribute::ClusterSpec allocation_cluster(int servers, int workers) {
  distribute::SlurmOptions options;
  options.jobs = {{"chief", 1}, {"worker", workers}, {"ps", servers}};
  return distribute::slurm_cluster(options,
                                   [](const char* name) -> const char* {
                                     std::string n = name;
                                     if (n == "SLURM_PROCID") return "0";
                                     if (n == "SLURMD_NODENAME" || n.starts_with("SLURM_STEP_")) return nullptr;
                                     return std::getenv(name);
                                   })
      .spec;
}

// `srun --mpi=pmix` of the ranks in this allocation's tasks (all of them, or -np N), with the
// settings mpirun would get as flags given as Open MPI's environment variables, which srun passes on.
// A rank that fails ends the others, as under mpirun (a stopped rank would otherwise hold the step
// open after the others named it and ended).
int srun_ranks(int np, const std::string& network, const std::vector<std::string>& extra,
               const std::vector<std::string>& command, bool dry_run) {
  if (!dry_run) {
    std::string offered;
    std::optional<int> code = run_command({"srun", "--mpi=list"}, &offered, 30);
    if (!code || *code != 0 || offered.find("pmix") == std::string::npos)
      fail(
          "launch: inside Slurm job {}, ranks start with `srun --mpi=pmix`, but {}: install Slurm's PMIx plugin "
          "(Debian: slurm-wlm-basic-plugins), or start them with --launcher mpirun",
          std::getenv("SLURM_JOB_ID"),
          !code ? std::string("srun --mpi=list did not answer within 30 s")
                : fmt::format("srun --mpi=list offers no pmix ({})", offered.empty() ? "nothing said" : offered));
  }
  std::vector<std::pair<std::string, std::string>> mca = {{"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
                                                          {"OMPI_MCA_mpi_yield_when_idle", "1"}};  // as run_launch's
  if (!network.empty())
    mca.insert(mca.end(), {{"OMPI_MCA_oob_tcp_if_include", network},
                           {"OMPI_MCA_btl_tcp_if_include", network},
                           {"OMPI_MCA_btl", "self,vader,tcp"}});
  // PMIx's job data from Slurm's server through its hash store, not the shared-memory one (ds21):
  // a rank 0 ended by a segmentation fault at address 0 in MPI's start, once in a CI run's 3
  // launches under srun, matches ds21's reported intermittent crashes (PMIx issues 1114, 2210);
  // the hash store is PMIx's own fallback (the workaround those reports give), and the same job
  // runs with it (test_slurm).
  mca.emplace_back("PMIX_MCA_gds", "hash");
  std::vector<std::string> argv{"srun", "--mpi=pmix", "--export=ALL", "--kill-on-bad-exit=1"};
  if (np > 0) argv.insert(argv.end(), {"--ntasks", std::to_string(np)});
  std::string set;
  for (const auto& [var, value] : mca) {
    if (std::getenv(var.c_str()) != nullptr) continue;  // the user's own stands
    setenv(var.c_str(), value.c_str(), 1);
    set += fmt::format("{}={} ", var, value);
  }
  setenv("TANDEM_STDOUT_IS_TERMINAL", isatty(STDOUT_FILENO) != 0 ? "1" : "0", 1);
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), command.begin(), command.end());
  return print_or_run(argv, set, dry_run, fmt::format("inside Slurm job {}", std::getenv("SLURM_JOB_ID")));
}

}  // namespace

int run_launch(const std::vector<std::string>& args) {
  int np = 0, servers = 0, workers = 0;
  std::string hosts, tf_config, rsh_agent, network;
  std::vector<std::string> extra, command;
  bool dry_run = false;
  double timeout = 30.0;
  int restarts = 3;
  std::string launcher;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= args.size()) fail("launch: {} needs a value\n{}", name, kUsage);
      return args[++i];
    };
    if (a == "--") {
      command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    } else if (a == "-np" || a == "-n" || a == "--np") {
      np = parse_count(value("-np"), "-np");
    } else if (a == "--ps") {
      servers = parse_count(value("--ps"), "--ps");
    } else if (a == "--workers") {
      workers = parse_count(value("--workers"), "--workers");
    } else if (a == "-H" || a == "--hosts") {
      hosts = value("-H");
    } else if (a == "--tf-config") {
      tf_config = value("--tf-config");
    } else if (a == "--network") {
      network = value("--network");
    } else if (a == "--rsh-agent") {
      rsh_agent = value("--rsh-agent");
    } else if (a == "--mpirun-arg") {
      extra.push_back(value("--mpirun-arg"));
    } else if (a == "--timeout") {
      std::string t = value("--timeout");
      char* end = nullptr;
      timeout = std::strtod(t.c_str(), &end);
      if (end == t.c_str() || *end != '\0' || !(timeout > 0 && timeout <= 86400))
        fail("launch: --timeout must be seconds from 0 to 86400, not \"{}\"", t);
    } else if (a == "--restarts") {
      std::string n = value("--restarts");
      restarts = n == "0" ? 0 : parse_count(n, "--restarts");
    } else if (a == "--launcher") {
      launcher = value("--launcher");
      if (launcher != "srun" && launcher != "mpirun")
        fail("launch: --launcher must be srun or mpirun, not \"{}\"", launcher);
    } else if (a == "--dry-run") {
      dry_run = true;
    } else if (a == "-h" || a == "--help") {
      std::puts(kUsage);
      return 0;
    } else {
      fail("launch: unknown flag \"{}\" (the command to start follows \"--\")\n{}", a, kUsage);
    }
  }
  if (command.empty()) fail("launch: no command to start: put it after \"--\"\n{}", kUsage);
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  bool in_allocation = slurm_job != nullptr && *slurm_job != '\0';
  if (launcher == "srun" && !in_allocation)
    fail(
        "launch: --launcher srun starts tasks inside a Slurm allocation (sbatch, salloc), and SLURM_JOB_ID is not set");
  if (servers > 0 || workers > 0) {
    if (servers == 0 || workers == 0)
      fail("launch: a parameter-server cluster needs both --ps P and --workers W (at least one of each)");
    if (np > 0 || !hosts.empty() || !tf_config.empty())
      fail(
          "launch: --ps/--workers start a cluster on this machine; -np, -H and --tf-config do not apply (a TF_CONFIG "
          "that lists \"ps\" tasks starts its cluster by itself)");
    check_program(command[0]);
    if (in_allocation && launcher != "mpirun")
      return run_cluster_launch(allocation_cluster(servers, workers), command, rsh_agent, timeout, restarts, dry_run,
                                true);
    return run_cluster_launch(loopback_cluster(servers, workers), command, rsh_agent, timeout, restarts, dry_run);
  }
  if (tf_config.empty() && std::getenv("TF_CONFIG") != nullptr) tf_config = std::getenv("TF_CONFIG");
  int slots = 0;
  if (!tf_config.empty()) {
    if (!hosts.empty()) fail("launch: give the hosts either with -H or in TF_CONFIG, not both");
    distribute::ClusterSpec spec = distribute::ClusterSpec::parse(tf_config, "launch: TF_CONFIG");
    if (spec.count("ps") > 0) {  // a parameter-server cluster: the chief (or a TF_CONFIG naming no task) starts it
      if (np > 0) fail("launch: -np does not apply to a TF_CONFIG that lists parameter servers");
      spec.check_hosts();
      bool names_task = nlohmann::json::parse(tf_config, nullptr, false).contains("task");
      if (names_task && spec.task().type != "chief") {
        std::printf("launch: TF_CONFIG task %s: the chief starts every task of the cluster; nothing to start here\n",
                    spec.task().str().c_str());
        return 0;
      }
      check_program(command[0]);
      return run_cluster_launch(spec, command, rsh_agent, timeout, restarts, dry_run);
    }
    Cluster cluster = parse_tf_config(spec);
    if (!cluster.launches) {
      std::printf(
          "launch: TF_CONFIG task %s: the first task of the cluster starts every worker through MPI; "
          "nothing to start here\n",
          cluster.task.c_str());
      return 0;
    }
    if (!dry_run) check_tasks_start(cluster.tasks, rsh_agent, timeout);
    std::map<std::string, int> per_host;
    std::vector<std::string> order;
    for (const RemoteTask& t : cluster.tasks)
      if (per_host[t.host]++ == 0) order.push_back(t.host);
    for (const std::string& h : order) hosts += fmt::format("{}{}:{}", hosts.empty() ? "" : ",", h, per_host[h]);
    if (np == 0) np = static_cast<int>(cluster.tasks.size());
    if (np != static_cast<int>(cluster.tasks.size()))
      fail("launch: -np {} differs from the {} workers TF_CONFIG lists", np, cluster.tasks.size());
  }
  if (!hosts.empty())
    for (const std::string& h : split(hosts, ',')) {
      auto colon = h.rfind(':');
      if (h.empty() || colon == 0) fail("launch: -H \"{}\": expected host1:slots,host2:slots", hosts);
      slots += colon == std::string::npos ? 1 : parse_count(h.substr(colon + 1), "a host's slots");
    }
  if (in_allocation && launcher != "mpirun" && hosts.empty()) {
    check_program(command[0]);
    return srun_ranks(np, network, extra, command, dry_run);
  }
  if (np == 0) np = slots > 0 ? slots : 0;
  if (np == 0) fail("launch: say how many processes to start: -np N (or -H host:slots,..., or TF_CONFIG)");

  check_program(command[0]);
  std::vector<std::string> argv{"mpirun", "-np", std::to_string(np)};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  if (np > (slots > 0 ? slots : usable_cores_here())) argv.push_back("--oversubscribe");
  if (!hosts.empty()) argv.insert(argv.end(), {"-H", hosts});
  argv.insert(argv.end(),
              {"--bind-to", "none", "--map-by", "slot", "--mca", "btl_vader_single_copy_mechanism", "none"});
  // A rank waiting in MPI yields its core: where two ranks share a core (another process holds the
  // other, or more ranks than free cores), busy polling made each wait out the other's time slice
  // (3 epochs of the tutorial MLP, 2 ranks on one core: 43.2 s polling, 1.25 s yielding; no cost
  // measured on free cores). A user's own setting, in the environment or --mpirun-arg, stands.
  bool user_sets_yield = std::getenv("OMPI_MCA_mpi_yield_when_idle") != nullptr ||
                         std::any_of(extra.begin(), extra.end(),
                                     [](const std::string& a) { return a.find("mpi_yield_when_idle") != a.npos; });
  if (!user_sets_yield) argv.insert(argv.end(), {"--mca", "mpi_yield_when_idle", "1"});
  if (!rsh_agent.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", rsh_agent});
  if (!network.empty())  // launch daemons and ranks talk over that network only
    argv.insert(argv.end(), {"--mca", "oob_tcp_if_include", network, "--mca", "btl_tcp_if_include", network, "--mca",
                             "btl", "self,vader,tcp"});
  // The ranks' output reaches this process's through the launcher's pseudo-terminals: what this
  // one's is decides whether progress redraws in place.
  setenv("TANDEM_STDOUT_IS_TERMINAL", isatty(STDOUT_FILENO) != 0 ? "1" : "0", 1);
  for (char** e = environ; *e != nullptr; ++e) {
    std::string name(*e, std::strchr(*e, '=') != nullptr ? std::strchr(*e, '=') - *e : std::strlen(*e));
    if (name.starts_with("TANDEM_") || name == "OMP_NUM_THREADS" || name == "PATH" || name == "LD_LIBRARY_PATH")
      argv.insert(argv.end(), {"-x", name});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), command.begin(), command.end());
  return print_or_run(argv, "", dry_run, "install Open MPI (Debian: openmpi-bin)");
}

}  // namespace tandem::cli
