// TF_CONFIG's cluster spec (tandem/distribute/cluster.h).
#include "tandem/distribute/cluster.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "tandem/error.h"
#include "tandem/io.h"

namespace tandem::distribute {
namespace {

const char* const kTypes[] = {"chief", "worker", "ps"};

// "host:port" or "[v6]:port" → (host, port), or an Error naming the task.
std::pair<std::string, int> split_address(const std::string& address, const std::string& source,
                                          const std::string& task) {
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::string port_text = colon == std::string::npos ? "" : address.substr(colon + 1);
  if (host.empty() || port_text.empty()) fail("{}: task {} (\"{}\") is not \"host:port\"", source, task, address);
  char* end = nullptr;
  errno = 0;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || port < 1 || port > 65535 || !std::isdigit(static_cast<unsigned char>(port_text[0])))
    fail("{}: task {} (\"{}\"): the port must be a number from 1 to 65535, not \"{}\"", source, task, address,
         port_text);
  return {host, static_cast<int>(port)};
}

}  // namespace

std::string TaskId::str() const { return type + ":" + std::to_string(index); }

ClusterSpec ClusterSpec::parse(const std::string& json, const std::string& source) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", source, e.what());
  }
  if (!config.is_object() || !config.contains("cluster") || !config["cluster"].is_object())
    fail(
        "{} has no \"cluster\" object (expected {{\"cluster\": {{\"worker\": [\"host:port\", ...]}}, \"task\": "
        "{{\"type\": \"worker\", \"index\": 0}}}})",
        source);
  ClusterSpec spec;
  spec.source_ = source;
  for (const auto& item : config["cluster"].items()) {
    const std::string& type = item.key();
    std::vector<std::string>* list = type == "chief"    ? &spec.chief_
                                     : type == "worker" ? &spec.worker_
                                     : type == "ps"     ? &spec.ps_
                                                        : nullptr;
    if (list == nullptr)
      fail("{}: cluster.{}: unknown task type (a cluster has \"chief\", \"worker\" and \"ps\" tasks)", source, type);
    if (!item.value().is_array()) fail("{}: cluster.{} must be a list of \"host:port\"", source, type);
    for (const auto& entry : item.value()) {
      std::string task = fmt::format("{}:{}", type, list->size());
      if (!entry.is_string())
        fail("{}: cluster.{}[{}] must be a \"host:port\" string, not {}", source, type, list->size(), entry.dump());
      split_address(entry.get<std::string>(), source, task);
      list->push_back(entry.get<std::string>());
    }
  }
  if (spec.chief_.size() > 1)
    fail("{}: cluster.chief lists {} tasks; a cluster has at most one chief", source, spec.chief_.size());
  std::map<std::string, std::string> seen;  // address → task
  for (const char* type : kTypes)
    for (size_t i = 0; i < spec.tasks(type).size(); ++i) {
      std::string task = fmt::format("{}:{}", type, i);
      auto [it, fresh] = seen.emplace(spec.tasks(type)[i], task);
      if (!fresh)
        fail("{}: tasks {} and {} are both at {}: every task needs an address of its own", source, it->second, task,
             it->first);
    }
  if (seen.empty()) fail("{}: the cluster lists no task", source);
  spec.task_ = {"worker", 0};
  if (config.contains("task")) {
    const auto& task = config["task"];
    if (!task.is_object() || !task.value("type", nlohmann::json("worker")).is_string() ||
        !task.value("index", nlohmann::json(0)).is_number_integer())
      fail("{}: task must be {{\"type\": \"worker\", \"index\": N}}, not {}", source, task.dump());
    spec.task_.type = task.value("type", std::string("worker"));
    int64_t index = task.value("index", int64_t{0});
    int of_type = spec.count(spec.task_.type);
    if (of_type == 0) {
      std::string have;
      for (const char* type : kTypes)
        if (spec.count(type) > 0) have += (have.empty() ? "" : ", ") + std::string(type);
      fail("{}: task type \"{}\" is not in the cluster (it has {} tasks)", source, spec.task_.type, have);
    }
    if (index < 0 || index >= of_type)
      fail("{}: task index {} is out of range: the cluster lists {} {} task{} (0 to {})", source, index, of_type,
           spec.task_.type, of_type == 1 ? "" : "s", of_type - 1);
    spec.task_.index = static_cast<int>(index);
  } else if (spec.worker_.empty()) {
    spec.task_ = {spec.chief_.empty() ? "ps" : "chief", 0};
  }
  return spec;
}

ClusterSpec ClusterSpec::from_environment() {
  const char* text = std::getenv("TF_CONFIG");
  if (text == nullptr || *text == '\0')
    fail(
        "TF_CONFIG is not set: a cluster's tasks are named there, as with TensorFlow (or in a file: --cluster FILE); "
        "to start a whole cluster on this machine: tandem launch --ps 1 --workers 2 -- tandem fit --strategy ps-async "
        "...");
  return parse(text, "TF_CONFIG");
}

ClusterSpec ClusterSpec::from_file(const std::string& path) { return parse(io::read_file(path), path); }

ClusterSpec ClusterSpec::local(int num_ps, int num_workers) {
  if (num_ps < 1 || num_ps > 9999) fail("an in-process cluster: num_ps must be from 1 to 9999 servers, got {}", num_ps);
  if (num_workers < 1 || num_workers > 9999)
    fail("an in-process cluster: num_workers must be from 1 to 9999, got {}", num_workers);
  static std::atomic<uint64_t> clusters{0};
  ClusterSpec spec;
  spec.source_ = "an in-process cluster";
  spec.local_id_ = ++clusters;
  spec.chief_.assign(1, "inproc");
  spec.ps_.assign(static_cast<size_t>(num_ps), "inproc");
  spec.worker_.assign(static_cast<size_t>(num_workers), "inproc");
  spec.task_ = {"chief", 0};
  return spec;
}

ClusterSpec ClusterSpec::as_task(const TaskId& task) const {
  address(task);  // an Error for a task the cluster lacks
  ClusterSpec spec = *this;
  spec.task_ = task;
  return spec;
}

std::string ClusterSpec::to_json(const TaskId& task) const {
  if (in_process()) fail("an in-process cluster has no TF_CONFIG: its tasks are threads of this process");
  nlohmann::json cluster = nlohmann::json::object();
  for (const char* type : kTypes)
    if (!tasks(type).empty()) cluster[type] = tasks(type);
  return nlohmann::json{{"cluster", cluster}, {"task", {{"type", task.type}, {"index", task.index}}}}.dump();
}

const std::vector<std::string>& ClusterSpec::tasks(const std::string& type) const {
  static const std::vector<std::string> none;
  return type == "chief" ? chief_ : type == "worker" ? worker_ : type == "ps" ? ps_ : none;
}

const std::string& ClusterSpec::address(const TaskId& task) const {
  const auto& list = tasks(task.type);
  if (task.index < 0 || task.index >= static_cast<int>(list.size()))
    fail("{}: the cluster has no task {}", source_, task.str());
  return list[static_cast<size_t>(task.index)];
}

std::string ClusterSpec::host(const TaskId& task) const {
  if (in_process()) {
    address(task);  // an Error for a task the cluster lacks
    return "127.0.0.1";
  }
  return split_address(address(task), source_, task.str()).first;
}
int ClusterSpec::port(const TaskId& task) const {
  if (in_process()) {
    address(task);  // an Error for a task the cluster lacks
    return 0;
  }
  return split_address(address(task), source_, task.str()).second;
}
std::string ClusterSpec::endpoint(const TaskId& task) const {
  if (in_process()) {
    address(task);  // an Error for a task the cluster lacks
    return fmt::format("inproc://tandem-cluster-{}/{}", local_id_, task.str());
  }
  std::string h = host(task);
  bool v6 = h.find(':') != std::string::npos;
  return fmt::format("tcp://{}{}{}:{}", v6 ? "[" : "", h, v6 ? "]" : "", port(task));
}
std::string ClusterSpec::listen_endpoint(const TaskId& task) const {
  if (in_process()) return endpoint(task);
  std::string h = host(task);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(h.c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
    fail("{}: task {} (\"{}\"): host \"{}\" does not resolve", source_, task.str(), address(task), h);
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = found->ai_family == AF_INET6
                        ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr);
  inet_ntop(found->ai_family, raw, text, sizeof text);
  bool v6 = found->ai_family == AF_INET6;
  freeaddrinfo(found);
  return fmt::format("tcp://{}{}{}:{}", v6 ? "[" : "", text, v6 ? "]" : "", port(task));
}

std::string ClusterSpec::describe(const TaskId& task) const {
  if (in_process()) {
    address(task);  // an Error for a task the cluster lacks
    return fmt::format("{} (in process)", task.str());
  }
  return fmt::format("{} ({})", task.str(), address(task));
}

void ClusterSpec::require(const std::vector<std::string>& needed, const std::vector<std::string>& allowed,
                          const std::string& what) const {
  for (const std::string& type : needed)
    if (count(type) == 0) fail("{}: the cluster has no {} task; {} needs at least one", source_, type, what);
  for (const char* type : kTypes)
    if (count(type) > 0 && std::find(allowed.begin(), allowed.end(), type) == allowed.end())
      fail("{}: cluster.{}: {} has no use for {} tasks", source_, type, what, type);
}

void ClusterSpec::check_hosts() const {
  if (in_process()) return;
  for (const char* type : kTypes)
    for (int i = 0; i < count(type); ++i) {
      TaskId task{type, i};
      std::string h = host(task);
      addrinfo* found = nullptr;
      if (getaddrinfo(h.c_str(), nullptr, nullptr, &found) != 0)
        fail("{}: task {} (\"{}\"): host \"{}\" does not resolve", source_, task.str(), address(task), h);
      freeaddrinfo(found);
    }
}

void ClusterSpec::check_own_port_free() const {
  if (in_process()) return;
  std::string h = host(task_);
  int p = port(task_);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(h.c_str(), std::to_string(p).c_str(), &hints, &found) != 0)
    fail("{}: task {} (\"{}\"): host \"{}\" does not resolve", source_, task_.str(), address(task_), h);
  int fd = socket(found->ai_family, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  bool bound = fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0;
  int error = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (!bound)
    fail("{}: task {} cannot listen on {}: {}{}", source_, task_.str(), address(task_), std::strerror(error),
         error == EADDRINUSE      ? " (another process has that port: give this task another one)"
         : error == EADDRNOTAVAIL ? " (that address is not one of this machine's)"
                                  : "");
}

}  // namespace tandem::distribute
