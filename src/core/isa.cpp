#include "core/isa.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "tandem/error.h"

namespace tandem::core {
namespace {

struct Cap {
  bool valid = true;
  Isa level = Isa::Avx512;
  std::string text;  // what the variable held
};

Cap read_cap() {
  Cap cap;
  const char* v = std::getenv("TANDEM_MAX_ISA");
  if (v == nullptr || *v == '\0') return cap;
  cap.text = v;
  std::string lower;
  for (char c : cap.text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "avx512") cap.level = Isa::Avx512;
  else if (lower == "avx2") cap.level = Isa::Avx2;
  else cap.valid = false;
  return cap;
}

const Cap& cap() {
  static const Cap read = read_cap();
  return read;
}

}  // namespace

Isa host_isa() {
  static const Isa level = [] {
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq");
    return avx512 ? Isa::Avx512 : avx2 ? Isa::Avx2 : Isa::X86_64;
  }();
  return level;
}

Isa isa() {
  const Cap& c = cap();
  if (!c.valid)
    fail("TANDEM_MAX_ISA: expected avx2 or avx512 (or unset for the host's level, {}), got \"{}\"",
         isa_name(host_isa()), c.text);
  return c.level < host_isa() ? c.level : host_isa();
}

bool isa_capped() { return isa() < host_isa(); }

std::string_view isa_name(Isa level) {
  switch (level) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::X86_64: return "x86-64";
  }
  return "x86-64";
}

}  // namespace tandem::core
