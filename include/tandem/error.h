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

// A file that could not be read or written: the system's error number beside the message (the
// Python module raises it as an OSError, FileNotFoundError for ENOENT).
class FileError : public Error {
 public:
  FileError(int error_number, const std::string& message) : Error(message), error_number_(error_number) {}
  int error_number() const { return error_number_; }

 private:
  int error_number_;
};

// Throws tandem::Error with a formatted message: fail("Dense \"{}\": ...", name, ...).
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tandem

namespace tandem {
// Throws tandem::FileError for the system error `error_number` (errno), the message formatted.
template <typename... Args>
[[noreturn]] void fail_file(int error_number, fmt::format_string<Args...> format, Args&&... args) {
  throw FileError(error_number, fmt::format(format, std::forward<Args>(args)...));
}
}  // namespace tandem
