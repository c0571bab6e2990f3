// libFuzzer target: a Slurm step's environment (host list, tasks per node, counts, the rank) and the
// command line's settings, as arbitrary text: an answer or a tandem::Error whose message is plain
// ASCII (the environment's bytes shown as \xNN: Python turns the message into a str), never a crash
// or a hang.
#include <cstdlib>
#include <map>
#include <string>

#include "tandem/distribute/slurm.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Fields split at newlines: SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS,
  // SLURM_PROCID, SLURMD_NODENAME, SLURM_STEP_GPUS, then the --cluster slurm: settings.
  std::string text(reinterpret_cast<const char*>(data), size);
  const char* names[] = {"SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS",
                         "SLURM_PROCID",        "SLURMD_NODENAME",           "SLURM_STEP_GPUS"};
  std::map<std::string, std::string> env;
  size_t at = 0;
  for (const char* name : names) {
    size_t end = text.find('\n', at);
    env[name] = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text.size() : end + 1;
  }
  auto ascii = [](const tandem::Error& e) {
    for (const char* c = e.what(); *c != '\0'; ++c)
      if (static_cast<unsigned char>(*c) >= 0x80) std::abort();
  };
  try {
    tandem::distribute::expand_slurm_hostlist(env["SLURM_STEP_NODELIST"]);
  } catch (const tandem::Error& e) {
    ascii(e);
  }
  try {
    tandem::distribute::SlurmOptions options = tandem::distribute::parse_slurm_options(text.substr(at));
    tandem::distribute::slurm_cluster(options, [&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  } catch (const tandem::Error& e) {
    ascii(e);
  }
  return 0;
}
