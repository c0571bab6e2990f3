#pragma once
// Three hosts as network namespaces on a bridge (tests/distribute/netns.sh), for the tests of
// `tandem launch` across machines: the launcher runs in the bridge's namespace and reaches the
// hosts through an rsh agent. ok() is false, with why(), where namespaces cannot be made.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_util.h"

namespace tandem::testing {

inline std::vector<std::string> split_text(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; (next = text.find(separator, at)) != std::string::npos; at = next + 1)
    out.push_back(text.substr(at, next - at));
  out.push_back(text.substr(at));
  return out;
}

class Namespaces {
 public:
  explicit Namespaces(const TempDir& dir)
      : prefix_(fmt::format("tdm{}", getpid() % 100000)),
        script_(std::filesystem::path(__FILE__).parent_path() / "netns.sh") {
    std::string log = dir.file("netns.log");
    ok_ = std::system(fmt::format("bash {} up {} 3 {} > {} 2>&1", script_, prefix_, dir.path(), log).c_str()) == 0;
    if (!ok_) why_ = io::read_file(log);
    else hosts_ = io::read_file(dir.file("hosts")), subnet_ = io::read_file(dir.file("subnet"));
    while (!hosts_.empty() && hosts_.back() == '\n') hosts_.pop_back();
    while (!subnet_.empty() && subnet_.back() == '\n') subnet_.pop_back();
  }
  ~Namespaces() { std::system(fmt::format("bash {} down {} > /dev/null 2>&1", script_, prefix_).c_str()); }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string host(int i) const { return fmt::format("{}-{}", prefix_, i); }
  // `tandem launch` across the three hosts (-H, or a TF_CONFIG naming `workers`), from the
  // bridge's namespace.
  std::vector<std::string> launch(const TempDir& dir, const std::vector<std::string>& fit,
                                  const std::vector<std::string>& workers = {}) const {
    if (workers.empty()) return launch_with(dir, {"-H", hosts_}, fit);
    nlohmann::json config = {{"cluster", {{"worker", workers}}}, {"task", {{"type", "worker"}, {"index", 0}}}};
    return launch_with(dir, {"--tf-config", config.dump(), "--timeout", "5"}, fit);
  }
  // `tandem launch FLAGS --rsh-agent AGENT --network SUBNET -- tandem ARGS...` from the bridge's namespace.
  std::vector<std::string> launch_with(const TempDir& dir, const std::vector<std::string>& flags,
                                       const std::vector<std::string>& args) const {
    std::vector<std::string> argv{"bash", script_, "hub", prefix_, TANDEM_CLI, "launch"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--rsh-agent", dir.file("agent"), "--network", subnet_, "--", TANDEM_CLI});
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  // The hosts' addresses, as TF_CONFIG's "address:port".
  std::vector<std::string> workers(int port = 2222) const {
    std::vector<std::string> out;
    for (const std::string& h : split_text(hosts_, ','))
      out.push_back(h.substr(0, h.find(':')) + ":" + std::to_string(port));
    return out;
  }

 private:
  std::string prefix_, script_, hosts_, subnet_, why_;
  bool ok_ = false;
};

}  // namespace tandem::testing
