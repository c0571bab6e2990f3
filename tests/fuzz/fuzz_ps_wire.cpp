// libFuzzer target: the parameter-server message decoder on arbitrary frames. The input is cut
// into frames at each 0xff 0xfe pair (so that the fuzzer can make headers of the right size);
// every item that decodes is copied out as a tensor and read as each typed item (a step's info, a
// push's info, an update policy), each of which must decode or be refused with a tandem::Error.
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
  namespace ps = tandem::distribute::ps;
  std::vector<ps::Item> items;
  try {
    items = ps::decode_items(frames);
  } catch (const tandem::Error&) {
    return 0;
  }
  for (const ps::Item& item : items) {
    (void)item.tensor();
    try {
      (void)ps::decode_step_info(item);
    } catch (const tandem::Error&) {
    }
    try {
      (void)ps::decode_push_info(item);
    } catch (const tandem::Error&) {
    }
    try {
      (void)ps::decode_policy(item, 3);
    } catch (const tandem::Error&) {
    }
  }
  return 0;
}
