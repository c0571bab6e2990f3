// The vector level (core/isa.h): the host's, or lower under TANDEM_MAX_ISA. The suite's capped run
// (tests/CMakeLists.txt: the kernel and deterministic tests again, prefixed "Avx2.", with
// TANDEM_MAX_ISA=avx2) is skipped on a host without AVX2, where it would test nothing new.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/isa.h"
#include "tandem/runtime.h"

namespace tandem {
namespace {

class CappedRunNeedsAvx2 : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* cap = std::getenv("TANDEM_MAX_ISA");
    if (cap != nullptr && std::string(cap) == "avx2" && core::host_isa() < core::Isa::Avx2)
      GTEST_SKIP() << "TANDEM_MAX_ISA=avx2: this CPU has no AVX2 and FMA, so there is no AVX2 path to test";
  }
};
[[maybe_unused]] ::testing::Environment* const capped_run = ::testing::AddGlobalTestEnvironment(new CappedRunNeedsAvx2);

TEST(Isa, TheLevelIsTheHostsUnlessTheEnvironmentCapsIt) {
  const char* cap = std::getenv("TANDEM_MAX_ISA");
  std::string want(core::isa_name(core::host_isa()));
  if (cap != nullptr && std::string(cap) == "avx2" && core::host_isa() >= core::Isa::Avx2) want = "avx2";
  EXPECT_EQ(cpu_isa(), want);
  EXPECT_EQ(core::isa_capped(), want != core::isa_name(core::host_isa()));
}

}  // namespace
}  // namespace tandem
