#pragma once
// Strategies by name ("mirrored:2:deterministic", "ps-sync:1", "mirrored:2+pipeline:2:8"): each
// strategy's room registers an entry (its name, grammar, one line of help, its traits and its
// factory, which parses the rest of the name), and make_strategy, the command line's help,
// `tandem compare` and the Python module ask the registry instead of testing names themselves.
// No family's header is included here: a family's own settings and its make_* live in its header.
#include <any>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

// What a strategy is made with beside its name: the settings any strategy may read, then each
// family's own, by type (the family's header defines it: DataParallelSettings in strategy.h,
// ParameterServerSettings, ModelParallelSettings), which fit's flags and the Python module fill and
// only that family reads.
struct StrategySettings {
  int threads_per_replica = 0;
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  std::function<void(const std::string&)> on_failure;
  // Processes on several machines without keys (MPI's ranks; a parameter-server cluster takes its
  // own): allowed, on a network the user trusts (--insecure).
  bool insecure = false;
  // Family T's settings, made with its defaults on first use.
  template <class T>
  T& of() {
    std::any& held = families_[std::type_index(typeid(T))];
    if (!held.has_value()) held = T{};
    return std::any_cast<T&>(held);
  }
  // Family T's settings as set, else its defaults.
  template <class T>
  T of() const {
    auto it = families_.find(std::type_index(typeid(T)));
    return it == families_.end() ? T{} : std::any_cast<const T&>(it->second);
  }

 private:
  std::map<std::type_index, std::any> families_;
};

enum class StrategyFamily { OneDevice, DataParallel, ParameterServer, ModelParallel, Pipeline };

// Which of `tandem compare`'s closing questions a strategy's row answers: the one device a split
// is measured against, the data split beside the model splits, the asynchronous and the
// synchronous parameter-server runs the last tutorial compares.
enum class CompareRole { None, OneDevice, DataSplit, AsynchronousUpdates, SynchronousUpdates };

// How `tandem compare` starts a strategy whose workers are processes: `tandem launch`'s arguments
// and the strategy each process's `tandem fit` is given.
struct LaunchPlan {
  std::vector<std::string> launcher_args;
  std::string fit_strategy;
  // A cluster's workers, which the chief's report does not count as its replicas (the row then keeps
  // its own name, with the tasks); 0: the report's replicas and name.
  int workers = 0;
};

struct StrategyEntry {
  std::string name;     // a spec's first word: "mirrored", "ps-sync"
  std::string grammar;  // "mirrored[:N[:deterministic]]"
  std::string help;     // one line, for --strategy's help
  StrategyFamily family = StrategyFamily::DataParallel;
  bool needs_launcher = false;  // its workers are processes that `tandem launch` starts
  bool copies = false;          // may follow "mirrored:D+" (D copies of a split model)
  // The command line's flags it reads beyond the common ones ("device-memory").
  std::vector<std::string> flags;
  CompareRole compare_role = CompareRole::None;
  // needs_launcher: a compare row's grammar, with the processes to start ("ps-sync:PxW[:B]"), and
  // the row's name as its launch; an Error naming the row and that grammar where it is wrong.
  std::string launch_grammar;
  std::function<LaunchPlan(const std::string& row)> launch;
  // The strategy `words` names (the spec split at ':', words[0] == name), as `copies` copies of it
  // (1 unless the spec began "mirrored:D+"); an Error from bad_strategy where the words are wrong.
  std::function<std::unique_ptr<Strategy>(const std::string& spec, const std::vector<std::string>& words, int copies,
                                          const StrategySettings& settings)>
      make;
};

// Every registered strategy, in the order of the grammar.
const std::vector<StrategyEntry>& strategy_entries();
// The entry `spec` names (the family of "mirrored:D+pipeline:S" is the pipeline's), or null.
const StrategyEntry* strategy_entry(const std::string& spec);
// The grammar of every name, for errors and help: "default, one_device, mirrored[:N[...]], ...".
std::string strategy_grammar();
// --strategy's help: every name's grammar and line, then the names of D copies of a split model.
std::string strategy_help();
// The names `tandem compare` takes: the grammar of each, with the processes to launch where it has them.
std::string compare_grammar();
// Whether `tandem compare` starts the workers `spec` names as processes under `tandem launch`: its
// family needs a launcher and the name does not end in ":threads" (tasks as threads of this process).
bool launches_processes(const std::string& spec);
// The names of the strategies that read the command-line flag `flag` ("cluster"), ", "-separated.
std::string strategies_reading(const std::string& flag);
// Refuses `spec`, saying why and what the names are.
[[noreturn]] void bad_strategy(const std::string& spec, const std::string& why);

std::unique_ptr<Strategy> make_strategy(const std::string& spec, const StrategySettings& settings);
std::unique_ptr<Strategy> make_strategy(const std::string& spec, int threads_per_replica = 0);

// The strategies from their option structs: what the names above parse into, and what
// tandem.distribute fills from TensorFlow's arguments. The strategy's constructor checks the
// options (the one place they are checked); these add the settings every family shares (threads,
// fusion, timeout, the cluster) and what the machine decides (threads per device when none are
// given; one device per process under `tandem launch`). The mirrored family's is here; each other
// family's is in its header (make_multiworker, make_parameter_servers, make_model_parallel,
// make_pipeline).
std::unique_ptr<Strategy> make_mirrored(MirroredOptions options, bool central, const StrategySettings& settings);

}  // namespace tandem::distribute
