// libFuzzer target: the IDX reader (plain and gzip) on arbitrary bytes, through a memory file.
#include <sys/mman.h>
#include <unistd.h>

#include "tandem/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("idx", 0);
  if (fd < 0) return 0;
  if (write(fd, data, size) == static_cast<ssize_t>(size)) {
    try {
      tandem::data::read_idx("/proc/self/fd/" + std::to_string(fd));
    } catch (const tandem::Error&) {
    }
  }
  close(fd);
  return 0;
}
