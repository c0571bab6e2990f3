// libFuzzer target: the csv loader on arbitrary bytes.
#include "tandem/data/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    tandem::data::parse_csv(bytes, "fuzz");
  } catch (const tandem::Error&) {
  }
  return 0;
}
