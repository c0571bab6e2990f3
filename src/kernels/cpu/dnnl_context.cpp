#include "kernels/cpu/dnnl_context.h"

#include "core/parallel.h"

namespace tandem::kernels::cpu {

DnnlContext& dnnl_context() {
  core::single_threaded_openmp();  // primitives made on this thread split no work of their own
  thread_local DnnlContext context;
  return context;
}

}  // namespace tandem::kernels::cpu
