// The timeline: spans kept in memory under a lock (a few per step), written as Chrome trace JSON.
#include "tandem/timeline.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tandem/error.h"

namespace tandem {
namespace {

// A JSON string literal of `text`.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", c);
      out += code;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Timeline::Timeline(int process, std::string label)
    : process_(process), label_(std::move(label)), origin_(Clock::now()) {}

void Timeline::record(const char* name, Clock::time_point begin, Clock::time_point end, const char* thread,
                      int64_t bytes) {
  auto us = [&](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  std::lock_guard lock(mutex_);
  auto [it, added] = thread_index_.emplace(std::this_thread::get_id(), static_cast<int>(thread_names_.size()));
  if (added) {
    thread_names_.emplace_back(fmt::format("thread {}", it->second));
    named_.push_back(false);
  }
  auto t = static_cast<size_t>(it->second);
  if (thread != nullptr && !named_[t]) {  // the first name given (a thread's first spans may have none)
    thread_names_[t] = thread;
    named_[t] = true;
  }
  events_.push_back({name, it->second, us(begin - origin_), us(end - begin), bytes});
}

std::map<std::string, Timeline::Total> Timeline::totals() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, Total> out;
  for (const Event& e : events_) {
    Total& t = out[e.name];
    t.seconds += e.duration_us / 1e6;
    ++t.count;
  }
  return out;
}

std::string Timeline::json() const {
  std::lock_guard lock(mutex_);
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out += fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": {}}}}})", process_,
                     quoted(label_.empty() ? fmt::format("rank {}", process_) : label_));
  for (size_t t = 0; t < thread_names_.size(); ++t)
    out += fmt::format(
        ",\n{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": {{\"name\": {}}}}}",
        process_, t, quoted(thread_names_[t]));
  for (const Event& e : events_) {
    out += fmt::format(
        ",\n{{\"name\": {}, \"cat\": {}, \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, \"dur\": {:.3f}",
        quoted(e.name), quoted(e.name), process_, e.thread, e.begin_us, e.duration_us);
    out += e.bytes >= 0 ? fmt::format(", \"args\": {{\"bytes\": {}}}}}", e.bytes) : std::string("}");
  }
  return out + "\n]}\n";
}

double hidden_fraction(const std::map<std::string, Timeline::Total>& totals) {
  auto reduce = totals.find("all_reduce"), wait = totals.find("wait");
  if (reduce == totals.end() || reduce->second.seconds <= 0) return 0.0;
  double waited = wait == totals.end() ? 0.0 : wait->second.seconds;
  return std::clamp(1.0 - waited / reduce->second.seconds, 0.0, 1.0);
}

void Timeline::write(const std::string& path) const {
  std::string text = json();
  std::string temporary = path + ".partial";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << text;
    file.flush();
    if (!file) fail("timeline: cannot write {}", temporary);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) fail("timeline: cannot rename {} to {}: {}", temporary, path, error.message());
}

}  // namespace tandem
