#pragma once
// A cluster spec as TensorFlow writes it (TF_CONFIG): the tasks by type, each "host:port", and the
// task this process is.
//   {"cluster": {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"],
//                "ps": ["10.0.0.4:2222"]},
//    "task": {"type": "worker", "index": 1}}
// Every mistake is named with the task and the value found: invalid JSON, a type that is not
// chief, worker or ps, a malformed address, a port out of range, two tasks on one address, a task
// type or index that the cluster does not have, a host that does not resolve.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::distribute {

struct TaskId {
  std::string type;  // "chief", "worker", "ps"
  int index = 0;
  std::string str() const;  // "worker:1"
  bool operator==(const TaskId&) const = default;
};

class ClusterSpec {
 public:
  // `source` names where the text came from in messages ("TF_CONFIG", a file's path).
  static ClusterSpec parse(const std::string& json, const std::string& source = "TF_CONFIG");
  // The environment's TF_CONFIG (an Error when it is not set).
  static ClusterSpec from_environment();
  static ClusterSpec from_file(const std::string& path);
  // A cluster in this process (ParameterServerStrategy's tasks as threads): a chief, `num_ps`
  // servers and `num_workers` workers, this process the chief. Its tasks talk over ZeroMQ's
  // inproc transport (addresses unique to this cluster, "inproc" in messages); TF_CONFIG is not read.
  static ClusterSpec local(int num_ps, int num_workers);
  bool in_process() const { return local_id_ != 0; }
  // The same cluster, naming `task` as this one's (an in-process cluster's threads).
  ClusterSpec as_task(const TaskId& task) const;
  // A spec written back as TF_CONFIG's JSON, naming `task` as this process's.
  std::string to_json(const TaskId& task) const;

  // The tasks of a type in index order ("host:port"); empty for a type the cluster lacks.
  const std::vector<std::string>& tasks(const std::string& type) const;
  int count(const std::string& type) const { return static_cast<int>(tasks(type).size()); }
  const std::string& address(const TaskId& task) const;
  // In process: every task on the loopback host (the control plane's), port 0.
  std::string host(const TaskId& task) const;
  int port(const TaskId& task) const;
  // Where ZeroMQ reaches the task: "tcp://host:port", or in process "inproc://tandem-cluster-ID/worker:1".
  std::string endpoint(const TaskId& task) const;
  // Where the task listens: endpoint() with the host resolved to its address (ZeroMQ binds to an
  // address or an interface, never to a host name).
  std::string listen_endpoint(const TaskId& task) const;
  // "ps:1 (127.0.0.1:2223)"
  std::string describe(const TaskId& task) const;
  const TaskId& task() const { return task_; }
  const std::string& source() const { return source_; }

  // Every task type in `types` has at least one task, and no other type is listed (an Error
  // naming what is missing or extra; `what` says who needs them: "ParameterServerStrategy").
  void require(const std::vector<std::string>& needed, const std::vector<std::string>& allowed,
               const std::string& what) const;
  // Every host resolves (an Error naming the first task whose host does not).
  void check_hosts() const;
  // This task's port is free to listen on (an Error naming the task and the port otherwise).
  void check_own_port_free() const;

 private:
  std::string source_;
  std::vector<std::string> chief_, worker_, ps_;
  TaskId task_;
  uint64_t local_id_ = 0;  // an in-process cluster's number in this process (0: none)
};

}  // namespace tandem::distribute
