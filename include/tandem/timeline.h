#pragma once
// What each thread of a process did and when (Horovod's timeline): spans named by phase
// ("forward", "backward", "all_reduce", "wait", "update"), written as Chrome trace JSON, which
// chrome://tracing and https://ui.perfetto.dev show one row per thread. There is no global one:
// whoever wants a record makes a Timeline and hands it to what should record into it (a
// strategy passes it to its step, its reducer and its communicator).
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // `process`: the trace's process id (the rank), `label`: its name ("rank 0 (host vm)").
  explicit Timeline(int process = 0, std::string label = {});

  // A span of the calling thread; `thread` names the thread's row (the first name given stays).
  void record(const char* name, Clock::time_point begin, Clock::time_point end, const char* thread = nullptr,
              int64_t bytes = -1);
  // Records from its construction to its destruction; a null timeline records nothing.
  class Span {
   public:
    Span(Timeline* timeline, const char* name, const char* thread = nullptr, int64_t bytes = -1)
        : timeline_(timeline), name_(name), thread_(thread), bytes_(bytes) {
      if (timeline_ != nullptr) begin_ = Clock::now();
    }
    ~Span() {
      if (timeline_ != nullptr) timeline_->record(name_, begin_, Clock::now(), thread_, bytes_);
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Timeline* timeline_;
    const char* name_;
    const char* thread_;
    int64_t bytes_;
    Clock::time_point begin_;
  };

  struct Total {
    double seconds = 0.0;
    int64_t count = 0;
  };
  // The time spent in each phase (summed over threads) and how many spans it has.
  std::map<std::string, Total> totals() const;
  // The Chrome trace ({"traceEvents": [...]}, microseconds from the timeline's creation).
  std::string json() const;
  // Writes json() to `path` (through a temporary file renamed over it); throws naming the path.
  void write(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    int thread;
    double begin_us, duration_us;
    int64_t bytes;
  };
  int process_;
  std::string label_;
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::map<std::thread::id, int> thread_index_;
  std::vector<std::string> thread_names_;
  std::vector<bool> named_;
};

// How much of the all-reduces' time ran behind other work: 1 − (time the training threads waited
// for reductions, "wait") ÷ (time the reductions took, "all_reduce"), from 0 to 1.
double hidden_fraction(const std::map<std::string, Timeline::Total>& totals);

}  // namespace tandem
