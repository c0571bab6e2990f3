// A cluster spec from a Slurm job step (tandem/distribute/slurm.h).
#include "tandem/distribute/slurm.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "tandem/error.h"

namespace tandem::distribute {
namespace {

// More names than any cluster has: a list past it is a mistake, not one to spend memory on.
constexpr size_t kMostNames = 65536;

// Text from the environment as a message can show it: bytes other than printable ASCII as \\xNN.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text)
    out += std::isprint(c) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  return out;
}

// A whole number from `text`, or an Error naming `what` and the text.
long whole(const std::string& text, const std::string& what, long low, long high) {
  char* end = nullptr;
  errno = 0;
  long n =
      text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) ? -1 : std::strtol(text.c_str(), &end, 10);
  if (n < 0 || end == nullptr || *end != '\0' || errno != 0 || n < low || n > high)
    fail("{}: expected a whole number from {} to {}, not \"{}\"", what, low, high, printable(text));
  return n;
}

// The list split at commas outside brackets.
std::vector<std::string> top_level(const std::string& list, const std::string& what) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) fail("{}: \"{}\" closes a bracket it never opened", what, printable(list));
    if (c == ',' && depth == 0) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  if (depth != 0) fail("{}: \"{}\" leaves a bracket open", what, printable(list));
  return out;
}

void expand_name(const std::string& name, const std::string& list, std::vector<std::string>& out) {
  size_t open = name.find('[');
  if (open == std::string::npos) {
    out.push_back(name);
    return;
  }
  size_t close = name.find(']', open);
  std::string head = name.substr(0, open), tail = name.substr(close + 1);
  std::string what = fmt::format("a Slurm host list (\"{}\")", printable(list));
  for (const std::string& range : top_level(name.substr(open + 1, close - open - 1), what)) {
    size_t dash = range.find('-');
    std::string first = range.substr(0, dash), last = dash == std::string::npos ? first : range.substr(dash + 1);
    long from = whole(first, what + ": a range's start", 0, LONG_MAX / 2);
    long to = whole(last, what + ": a range's end", from, from + 1000000);
    size_t width = first.size() > 1 && first[0] == '0' ? first.size() : 0;  // "n[01-10]": n01 ... n10
    for (long i = from; i <= to; ++i) {
      if (out.size() >= kMostNames) fail("{}: more than {} names", what, kMostNames);
      expand_name(head + fmt::format("{:0{}}", i, width) + tail, list, out);
    }
  }
}

// GPUs on this node when the caller gives no count: Slurm's list of the step's (or job's) GPUs, else
// the node's NVIDIA devices.
int gpus_here(const std::function<const char*(const char*)>& env) {
  for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"})
    if (const char* list = env(name); list != nullptr && *list != '\0')
      return static_cast<int>(std::count(list, list + std::strlen(list), ',') + 1);
  int n = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ignored)) {
    std::string file = entry.path().filename().string();
    if (file.size() > 6 && file.starts_with("nvidia") &&
        std::all_of(file.begin() + 6, file.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      ++n;
  }
  return n;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> out;
  std::string what = fmt::format("a Slurm host list (\"{}\")", printable(list));
  for (const std::string& name : top_level(list, what)) {
    if (name.empty()) fail("{}: an empty name", what);
    expand_name(name, list, out);
  }
  // A node's name is a host name: letters, digits, '-', '.' and '_' (what else reached a cluster
  // spec would be no address, and no JSON text either where it is not UTF-8).
  for (const std::string& name : out) {
    auto bad = std::find_if(name.begin(), name.end(), [](char c) {
      return !std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_';
    });
    if (bad == name.end()) continue;
    fail("{}: node name \"{}\" holds {} (a host name has letters, digits, '-', '.' and '_')", what, printable(name),
         std::isprint(static_cast<unsigned char>(*bad))
             ? fmt::format("'{}'", *bad)
             : fmt::format("byte 0x{:02x}", static_cast<unsigned char>(*bad)));
  }
  return out;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& text) {
  std::vector<int> out;
  std::string what = fmt::format("Slurm's tasks per node (\"{}\")", printable(text));
  for (const std::string& item : top_level(text, what)) {
    size_t paren = item.find("(x");
    int tasks = static_cast<int>(whole(item.substr(0, paren), what, 0, 100000));
    long times = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') fail("{}: \"{}\" is not \"N(xK)\"", what, printable(item));
      times = whole(item.substr(paren + 2, item.size() - paren - 3), what + ": a repeat", 1, 1000000);
    }
    if (out.size() + static_cast<size_t>(times) > kMostNames) fail("{}: more than {} nodes", what, kMostNames);
    out.insert(out.end(), static_cast<size_t>(times), tasks);
  }
  return out;
}

SlurmOptions parse_slurm_options(const std::string& text) {
  SlurmOptions options;
  if (text.empty()) return options;
  for (const std::string& item : top_level(text, "--cluster slurm")) {
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos)
      fail("--cluster slurm: \"{}\" is not NAME=VALUE (e.g. slurm:chief=1,worker=2,ps=1,port_base=8888)",
           printable(item));
    std::string what = fmt::format("--cluster slurm: {}", printable(key));
    if (key == "chief" || key == "worker" || key == "ps") {
      options.jobs.emplace_back(key, static_cast<int>(whole(value, what, 1, 100000)));
    } else if (key == "port_base") {
      options.port_base = static_cast<int>(whole(value, what, 1, 65535));
    } else if (key == "gpus_per_node") {
      options.gpus_per_node = static_cast<int>(whole(value, what, 0, 4096));
    } else if (key == "gpus_per_task") {
      options.gpus_per_task = static_cast<int>(whole(value, what, 0, 4096));
    } else if (key == "auto_set_gpu") {
      options.auto_set_gpu = whole(value, what, 0, 1) == 1;
    } else if (key == "tasks_per_node") {
      options.tasks_per_node = static_cast<int>(whole(value, what, 1, 100000));
    } else {
      fail(
          "--cluster slurm: unknown setting \"{}\" (expected chief, worker or ps counts, port_base, gpus_per_node, "
          "gpus_per_task, tasks_per_node or auto_set_gpu)",
          printable(key));
    }
  }
  return options;
}

SlurmCluster slurm_cluster(const SlurmOptions& options, const std::function<const char*(const char*)>& lookup) {
  auto env = lookup ? lookup : [](const char* name) -> const char* { return std::getenv(name); };
  auto first_of = [&](std::initializer_list<const char*> names, const char** found) -> std::string {
    for (const char* name : names)
      if (const char* value = env(name); value != nullptr && *value != '\0') {
        *found = name;
        return value;
      }
    *found = *names.begin();
    return "";
  };
  const char* rank_var = nullptr;
  std::string rank_text = first_of({"SLURM_PROCID"}, &rank_var);
  if (rank_text.empty())
    fail(
        "SlurmClusterResolver: SLURM_PROCID is not set: this process is not a task of a Slurm job step (start it with "
        "srun inside an allocation: sbatch, salloc)");
  const char *nodes_var = nullptr, *tasks_var = nullptr, *count_var = nullptr;
  std::string nodes_text = first_of({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &nodes_var);
  std::string count_text = first_of({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &count_var);
  if (nodes_text.empty()) fail("SlurmClusterResolver: {} is not set: which nodes the step has is unknown", nodes_var);
  if (count_text.empty())
    fail("SlurmClusterResolver: {} is not set: how many tasks the step has is unknown", count_var);
  std::string source = fmt::format("SlurmClusterResolver ({}={})", nodes_var, printable(nodes_text));
  int tasks = static_cast<int>(whole(count_text, fmt::format("SlurmClusterResolver: {}", count_var), 1, 1000000));
  int rank = static_cast<int>(whole(rank_text, "SlurmClusterResolver: SLURM_PROCID", 0, tasks - 1));
  std::vector<std::string> nodes = expand_slurm_hostlist(nodes_text);

  // Tasks on each node, in the nodes' order.
  std::vector<int> per_node;
  if (!options.tasks_per_node_by_name.empty()) {
    std::map<std::string, int> given(options.tasks_per_node_by_name.begin(), options.tasks_per_node_by_name.end());
    for (const std::string& node : nodes) {
      auto it = given.find(node);
      if (it == given.end()) fail("{}: tasks_per_node names no count for node \"{}\"", source, node);
      per_node.push_back(it->second);
      given.erase(it);
    }
    if (!given.empty())
      fail("{}: tasks_per_node names node \"{}\", which is not one of the step's", source, given.begin()->first);
  } else if (options.tasks_per_node) {
    per_node.assign(nodes.size(), *options.tasks_per_node);
  } else {
    std::string text = first_of({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tasks_var);
    if (text.empty()) fail("SlurmClusterResolver: {} is not set: give tasks_per_node", tasks_var);
    per_node = expand_slurm_tasks_per_node(text);
    if (per_node.size() != nodes.size())
      fail("SlurmClusterResolver: {}={} counts tasks on {} nodes, but {}={} has {}", tasks_var, printable(text),
           per_node.size(), nodes_var, printable(nodes_text), nodes.size());
  }
  int placed = 0, most = 0;
  for (int n : per_node) placed += n, most = std::max(most, n);
  if (placed != tasks) fail("{}: {} tasks on its nodes, but the step has {} ({})", source, placed, tasks, count_var);

  int gpus_per_node = options.gpus_per_node ? *options.gpus_per_node : gpus_here(env);
  int gpus_per_task = options.gpus_per_task ? *options.gpus_per_task : most > 0 ? gpus_per_node / most : 0;
  if (gpus_per_task * most > gpus_per_node)
    fail("{}: {} tasks on a node at {} GPUs each need {} GPUs, but a node has {} (gpus_per_node)", source, most,
         gpus_per_task, gpus_per_task * most, gpus_per_node);

  // Each task's address and GPUs, in rank order (Slurm's block distribution: a node's tasks together).
  std::vector<std::string> addresses, gpus, hosts;
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int t = 0; t < per_node[n]; ++t) {
      if (options.port_base + t > 65535)
        fail("{}: port_base {} plus {} tasks on node {} passes port 65535", source, options.port_base, per_node[n],
             nodes[n]);
      addresses.push_back(fmt::format("{}:{}", nodes[n], options.port_base + t));
      hosts.push_back(nodes[n]);
      std::string ids;
      for (int g = t * gpus_per_task; g < (t + 1) * gpus_per_task; ++g)
        ids += fmt::format("{}{}", ids.empty() ? "" : ",", g);
      gpus.push_back(ids);
    }
  std::string counts;
  for (int n : per_node) counts += fmt::format("{}{}", counts.empty() ? "" : ",", n);
  if (const char* here = env("SLURMD_NODENAME"); here != nullptr && *here != '\0' && hosts[rank] != here)
    fail(
        "{}: Slurm placed rank {} on node {}, but the nodes' order with {} task(s) each puts it on {}: the resolver "
        "takes Slurm's block distribution (srun --distribution=block, the default); give tasks_per_node if the step's "
        "counts are not the allocation's",
        source, rank, printable(here), counts, hosts[rank]);

  // The jobs, in their names' order (TensorFlow's), take the tasks in rank order.
  std::vector<std::pair<std::string, int>> jobs = options.jobs;
  if (jobs.empty()) jobs.emplace_back("worker", tasks);
  std::sort(jobs.begin(), jobs.end());
  int wanted = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (i > 0 && jobs[i].first == jobs[i - 1].first) fail("{}: jobs names \"{}\" twice", source, jobs[i].first);
    if (jobs[i].second < 1) fail("{}: jobs gives \"{}\" {} tasks (at least 1)", source, jobs[i].first, jobs[i].second);
    wanted += jobs[i].second;
  }
  if (wanted != tasks) {
    std::string listed;
    for (const auto& [name, n] : jobs) listed += fmt::format("{}{}={}", listed.empty() ? "" : ", ", name, n);
    fail("{}: jobs ({}) add up to {} tasks, but the step has {} ({}): every task needs a role and every role a task",
         source, listed, wanted, tasks, count_var);
  }
  nlohmann::json cluster = nlohmann::json::object();
  nlohmann::json task;
  int start = 0;
  for (const auto& [name, n] : jobs) {
    cluster[name] = std::vector<std::string>(addresses.begin() + start, addresses.begin() + start + n);
    if (rank >= start && rank < start + n) task = {{"type", name}, {"index", rank - start}};
    start += n;
  }
  SlurmCluster out{ClusterSpec::parse(nlohmann::json{{"cluster", cluster}, {"task", task}}.dump(), source), rank,
                   gpus[rank]};
  return out;
}

}  // namespace tandem::distribute
