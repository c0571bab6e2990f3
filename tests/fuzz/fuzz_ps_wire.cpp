// libFuzzer target: the parameter-server message decoder on arbitrary frames. The input is cut
// into frames at each 0xff 0xfe pair (so that the fuzzer can make headers of the right size);
// every item that decodes is copied out as a tensor.
#include <string_view>
#include <vector>

#include "distribute/ps/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> frames;
  size_t from = 0;
  for (size_t i = 0; i + 1 < size; ++i)
    if (data[i] == 0xff && data[i + 1] == 0xfe) {
      frames.push_back(bytes.substr(from, i - from));
      from = i + 2;
      ++i;
    }
  frames.push_back(bytes.substr(from));
  try {
    for (const auto& item : tandem::distribute::ps::decode_items(frames)) (void)item.tensor();
  } catch (const tandem::Error&) {
  }
  return 0;
}
