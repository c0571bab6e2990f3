#pragma once
// The vector instruction level Tandem's own kernels run at: the host's, capped by the environment
// variable TANDEM_MAX_ISA (avx2 or avx512), read once. Every hand-written kernel has a path for
// each level (x86-64-v4: AVX-512; x86-64-v3: AVX2 + FMA; plain x86-64, which has no FMA
// instruction and is not a level Tandem claims speed for) and asks isa() which one runs, so that
// an AVX-512 host runs and measures the AVX2 paths under the cap.
#include <string_view>

namespace tandem::core {

enum class Isa { X86_64 = 0, Avx2 = 1, Avx512 = 2 };

// The host's level: AVX-512 (F, CD, VL, BW, DQ) with AVX2 and FMA; AVX2 with FMA; else plain.
Isa host_isa();
// min(host_isa(), the cap). A value of TANDEM_MAX_ISA other than avx2 or avx512 (any case) throws
// tandem::Error naming it, here and at every later call.
Isa isa();
// Whether TANDEM_MAX_ISA lowers this host's level (oneDNN is then capped to match).
bool isa_capped();
std::string_view isa_name(Isa level);  // "avx512", "avx2", "x86-64"

}  // namespace tandem::core
