#include "kernels/cpu/dnnl_context.h"

namespace tandem::kernels::cpu {

DnnlContext& dnnl_context() {
  thread_local DnnlContext context;
  return context;
}

}  // namespace tandem::kernels::cpu
