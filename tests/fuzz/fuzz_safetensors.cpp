// libFuzzer target: the safetensors reader (checkpoints) on arbitrary bytes, through a memory file.
#include <sys/mman.h>
#include <unistd.h>

#include "tandem/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("safetensors", 0);
  if (fd < 0) return 0;
  if (write(fd, data, size) == static_cast<ssize_t>(size)) {
    try {
      tandem::io::load_safetensors("/proc/self/fd/" + std::to_string(fd));
    } catch (const tandem::Error&) {
    }
  }
  close(fd);
  return 0;
}
