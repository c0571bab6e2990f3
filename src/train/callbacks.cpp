#include "tandem/callbacks.h"

#include "tandem/error.h"

namespace tandem {

double log_value(const Logs& logs, const std::string& name) {
  for (const auto& [n, v] : logs)
    if (n == name) return v;
  std::string have;
  for (const auto& [n, v] : logs) have += (have.empty() ? "" : ", ") + n;
  fail("logs: no value named \"{}\"; have: {}", name, have);
}

const std::vector<double>& History::operator[](const std::string& name) const {
  auto it = history.find(name);
  if (it == history.end()) {
    std::string have;
    for (const auto& [n, v] : history) have += (have.empty() ? "" : ", ") + n;
    fail("History: no series named \"{}\"; have: {}", name, have);
  }
  return it->second;
}

}  // namespace tandem
