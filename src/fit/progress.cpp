#include "fit/progress.h"

#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <string>

namespace tandem::train {
namespace {

std::string format_eta(double seconds) {
  auto s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s % 3600) / 60, s % 60);
  if (s >= 60) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string format_per_step(double seconds) {
  if (seconds >= 1.0) return fmt::format("{:.0f}s/step", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.0f}ms/step", seconds * 1e3);
  return fmt::format("{:.0f}us/step", seconds * 1e6);
}

std::string format_logs(const Logs& logs) {
  std::string s;
  for (const auto& [name, value] : logs) s += fmt::format(" - {}: {:.4f}", name, value);
  return s;
}

}  // namespace

namespace {

// Under a launcher a rank's output is a pseudo-terminal (Open MPI's) whatever the launcher's own
// is: `tandem launch` says which in TANDEM_STDOUT_IS_TERMINAL, so that logs piped from a job stay
// free of terminal control codes.
bool is_terminal(std::FILE* out) {
  if (const char* said = std::getenv("TANDEM_STDOUT_IS_TERMINAL"); said != nullptr && out == stdout)
    return std::string(said) == "1";
  return isatty(fileno(out)) != 0;
}

}  // namespace

ProgressBar::ProgressBar(int64_t total_steps, int verbose, std::FILE* out)
    : total_(total_steps), verbose_(verbose), terminal_(is_terminal(out)), out_(out) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

bool ProgressBar::due(int64_t step) const {
  if (verbose_ != 1 || !terminal_ || (total_ > 0 && step >= total_)) return false;
  return std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(100);
}

void ProgressBar::update(int64_t step, const Logs& logs) {
  if (!due(step)) return;
  last_draw_ = std::chrono::steady_clock::now();
  draw(step, logs, false);
}

void ProgressBar::finish(int64_t steps, const Logs& logs) {
  if (verbose_ == 0) return;
  draw(total_ > 0 ? std::min(total_, steps) : steps, logs, true);  // fewer when a callback stopped fit
}

void ProgressBar::draw(int64_t step, const Logs& logs, bool final) {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (total_ <= 0) {  // a pipeline of unknown length: the count so far, no bar
    std::string line = fmt::format("{}/Unknown - {:.0f}s", step, elapsed) + format_logs(logs);
    if (terminal_ && verbose_ == 1) std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
    else if (final) std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
    return;
  }
  int width = static_cast<int>(std::to_string(total_).size());
  std::string line = fmt::format("{:>{}}/{}", step, width, total_);
  if (verbose_ == 1) {
    const int bar = 30;
    int filled = total_ > 0 ? static_cast<int>(bar * step / total_) : bar;
    std::string b(static_cast<size_t>(filled), '=');
    if (filled < bar) b += '>';
    b.resize(bar, '.');
    line += " [" + b + "]";
  }
  double per_step = step > 0 ? elapsed / static_cast<double>(step) : 0.0;
  if (final) line += fmt::format(" - {:.0f}s {}", elapsed, format_per_step(per_step));
  else line += " - ETA: " + format_eta(per_step * static_cast<double>(total_ - step));
  line += format_logs(logs);
  if (terminal_ && verbose_ == 1) std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  else std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace tandem::train
