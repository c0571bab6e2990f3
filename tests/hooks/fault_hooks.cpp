// The fault hooks (src/core/fault_hooks.h) of the test programs and of build/tandem-test, read
// from the environment when the program starts:
//   TANDEM_TEST_FAULT=kill|stop:RANK:PHASE   rank RANK dies (SIGKILL) or stops (SIGSTOP) as it
//                                            enters PHASE ("start-up", "training", "checkpoint
//                                            writing"; dashes for spaces; a parameter-server
//                                            task's "greeting" the chief and, greeted,
//                                            "connecting" its control connection)
//   TANDEM_TEST_FAULT=kill|hang:RANK:STEP    a multi-worker rank dies, or stays alive without
//                                            arriving, before step STEP
//   TANDEM_TEST_FAULT=kill|stop:RANK:send-N  a process of an MPI job dies or stops at its Nth
//                                            point-to-point send, its header out and not its data
//                                            (or collective-N: as it enters its Nth collective;
//                                            entered-N: once in it, the others told by a beat)
//   TANDEM_TEST_FAULT_ONCE=FILE              the phase fault fires once: FILE is written then, and
//                                            no fault fires while it exists
//   TANDEM_TEST_PS_SLOW_WORKER=INDEX:MS      parameter-server worker INDEX is MS ms slower per step
// A value that does not parse is an error naming it (the tests must not run faultless by mistake).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "core/fault_hooks.h"
#include "tandem/error.h"

namespace tandem::fault_hooks {
namespace {

// "checkpoint writing", "checkpoint-writing" and "Checkpoint_Writing" name the same phase.
std::string phase_key(const std::string& phase) {
  std::string key;
  for (char c : phase)
    key += c == ' ' || c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

struct Fault {
  std::string kind, at;  // at: a phase or a step
  int rank = -1;
};

// TANDEM_TEST_FAULT, or nothing when unset, or when TANDEM_TEST_FAULT_ONCE names a file that exists
// (a fault that fired once there: a restarted task does not die again).
std::optional<Fault> fault() {
  const char* text = std::getenv("TANDEM_TEST_FAULT");
  if (text == nullptr || *text == '\0') return std::nullopt;
  if (const char* once = std::getenv("TANDEM_TEST_FAULT_ONCE"); once != nullptr && std::filesystem::exists(once))
    return std::nullopt;
  char kind[8] = {}, at[64] = {};
  Fault f;
  if (std::sscanf(text, "%7[a-z]:%d:%63[a-zA-Z0-9_ -]", kind, &f.rank, at) != 3 ||
      (std::string(kind) != "kill" && std::string(kind) != "stop" && std::string(kind) != "hang"))
    fail("TANDEM_TEST_FAULT: expected kill|stop:RANK:PHASE or kill|hang:RANK:STEP, got \"{}\"", text);
  f.kind = kind;
  f.at = at;
  return f;
}

// Marks the fault fired, where TANDEM_TEST_FAULT_ONCE asks for it.
void fired() {
  if (const char* once = std::getenv("TANDEM_TEST_FAULT_ONCE"); once != nullptr) std::ofstream(once) << "fired\n";
}

bool is_step(const std::string& at) { return !at.empty() && at.find_first_not_of("0123456789") == std::string::npos; }

struct Install {
  Install() {
    Hooks& h = hooks();
    h.phase_signal = [](int rank, const std::string& phase) {
      std::optional<Fault> f = fault();
      if (!f || f->rank != rank || is_step(f->at) || phase_key(f->at) != phase_key(phase)) return 0;
      fired();
      return f->kind == "kill" ? SIGKILL : f->kind == "stop" ? SIGSTOP : 0;
    };
    h.step_fault = [](int rank) {
      std::optional<Fault> f = fault();
      if (!f || f->rank != rank || !is_step(f->at)) return std::pair<int64_t, bool>{-1, false};
      return std::pair<int64_t, bool>{std::stoll(f->at), f->kind == "kill"};
    };
    h.message_signal = [](int rank, const char* kind, int64_t n) {
      std::optional<Fault> f = fault();
      if (!f || f->rank != rank || f->at != fmt::format("{}-{}", kind, n)) return 0;
      fired();
      return f->kind == "kill" ? SIGKILL : f->kind == "stop" ? SIGSTOP : 0;
    };
    h.straggler_ms = [](int worker) -> int64_t {
      const char* spec = std::getenv("TANDEM_TEST_PS_SLOW_WORKER");
      if (spec == nullptr) return 0;
      int index = -1;
      long long ms = 0;
      if (std::sscanf(spec, "%d:%lld", &index, &ms) != 2 || ms < 0)
        fail("TANDEM_TEST_PS_SLOW_WORKER: expected INDEX:MILLISECONDS, got \"{}\"", spec);
      return index == worker ? ms : 0;
    };
  }
} install;

}  // namespace
}  // namespace tandem::fault_hooks
