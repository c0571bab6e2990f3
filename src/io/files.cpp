#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tandem/io.h"

namespace tandem::io {
namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) fail_file(errno, "cannot create \"{}\": {}", tmp, std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(f.fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        fail_file(err, "writing \"{}\" failed after {} of {} bytes: {}", tmp, done, bytes.size(), std::strerror(err));
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(f.fd) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      fail_file(err, "fsync of \"{}\" failed: {}", tmp, std::strerror(err));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail_file(err, "cannot rename \"{}\" to \"{}\": {}", tmp, path, std::strerror(err));
  }
  // The rename itself is durable only once the directory entry is.
  Fd dir{::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd >= 0) ::fsync(dir.fd);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_file(errno, "cannot open \"{}\": {}", path, std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tandem::io
