// libFuzzer target: Keras model configs (model_from_json: Sequential and functional, Keras 2's and
// 3's layouts) on arbitrary text, each model read written back (to_json). Sizes past 4096 are left
// out (a file asking for a layer of 10^12 units is refused by the allocator, not the reader).
#include <nlohmann/json.hpp>

#include "tandem/model_json.h"

namespace {
bool small_numbers(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>() >= -4096 && j.get<double>() <= 4096;
  if (j.is_array() || j.is_object())
    for (const auto& e : j)
      if (!small_numbers(e)) return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
  if (!parsed.is_discarded() && !small_numbers(parsed)) return 0;
  try {
    std::unique_ptr<tandem::Model> model = tandem::model_from_json(text, {.seed = 1});
    (void)model->to_json();
  } catch (const tandem::Error&) {
  }
  return 0;
}
