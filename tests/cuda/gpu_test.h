#pragma once
// Tests that need a GPU: skipped, with the reason, where there is none (a build without a CUDA
// toolkit, a machine without a GPU or its driver). ctest runs them under the label `gpu`.
#include <gtest/gtest.h>

#include "tandem/cuda.h"

namespace tandem::testing {

// The reason a GPU test cannot run here, or "" when it can.
inline std::string why_no_gpu() {
  if (!cuda::registered()) return "this build has no CUDA device (configured without a CUDA toolkit)";
  if (cuda::device_count() == 0) return "no GPU here: " + cuda::why_none();
  return "";
}

}  // namespace tandem::testing

#define TANDEM_SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                        \
    if (std::string why = ::tandem::testing::why_no_gpu(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)
