#pragma once
// tandem::Error: the one exception type the library throws for bad input or a failed library call.
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws tandem::Error with a formatted message: fail("Dense \"{}\": ...", name, ...).
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tandem
