#pragma once
// Fault injection, for the tests only. The library asks these hooks where a test makes a task die,
// hang or lag; they are empty unless the program links tests/hooks/fault_hooks.cpp, which fills
// them from TANDEM_TEST_* variables: the test programs and the test build of the command
// (build/tandem-test). The release command and the Python module carry no fault hook.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace tandem::fault_hooks {

struct Hooks {
  // The signal a job's rank raises as it enters a phase of the job (0: none).
  std::function<int(int rank, const std::string& phase)> phase_signal;
  // A multi-worker rank's fault: the step before which it dies (true) or stays alive without
  // arriving (false); step -1: none.
  std::function<std::pair<int64_t, bool>(int rank)> step_fault;
  // The signal a process of an MPI job raises at its `n`th message of `kind` ("send": after a
  // point-to-point send's header is out, before its data; "collective": just before it enters one;
  // "entered": once it has entered one and said so), 0: none.
  std::function<int(int world_rank, const char* kind, int64_t n)> message_signal;
  // A parameter-server worker's delay per step, in milliseconds (a straggler).
  std::function<int64_t(int worker)> straggler_ms;
};

// Set once, before anything runs (a test program's static initializer); read-only after.
Hooks& hooks();

}  // namespace tandem::fault_hooks
