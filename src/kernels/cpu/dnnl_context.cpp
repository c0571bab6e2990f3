#include "kernels/cpu/dnnl_context.h"

#include <cstdio>
#include <cstdlib>

#include "core/isa.h"
#include "core/parallel.h"

namespace tandem::kernels::cpu {

void follow_isa_cap() {
  static const bool done = [] {
    const char* own = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (core::isa() >= core::host_isa() || (own != nullptr && *own != '\0')) return true;
    // The cap is at most avx2 when it lowers anything (core/isa.h).
    if (dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) != dnnl_success)
      std::fprintf(stderr,
                   "tandem: TANDEM_MAX_ISA=avx2 could not cap oneDNN (it ran before); set ONEDNN_MAX_CPU_ISA too\n");
    return true;
  }();
  (void)done;
}

DnnlContext& dnnl_context() {
  follow_isa_cap();
  core::single_threaded_openmp();  // primitives made on this thread split no work of their own
  thread_local DnnlContext context;
  return context;
}

}  // namespace tandem::kernels::cpu
