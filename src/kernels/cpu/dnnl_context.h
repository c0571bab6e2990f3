#pragma once
// The oneDNN engine and stream of the calling thread, and a small execute helper that passes
// arguments as an array (the C++ API's map would allocate on every call).
#include <dnnl.hpp>
#include <initializer_list>

#include "kernels/cpu/dnnl_check.h"
#include "kernels/cpu/signals_held.h"

namespace tandem::kernels::cpu {

struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};
DnnlContext& dnnl_context();  // one per thread

// Caps oneDNN's instruction set to core::isa() where TANDEM_MAX_ISA lowers it (and the user set no
// ONEDNN_MAX_CPU_ISA of their own), once, before oneDNN's first kernel: what a capped run measures is
// the lower level throughout. Every entry into oneDNN calls it.
void follow_isa_cap();

struct DnnlArg {
  int kind;
  dnnl::memory* memory;
  const void* data;
};

inline void dnnl_execute(const dnnl::primitive& p, std::initializer_list<DnnlArg> args) {
  dnnl_exec_arg_t raw[8];
  int n = 0;
  for (const DnnlArg& a : args) {
    a.memory->set_data_handle(const_cast<void*>(a.data));
    raw[n++] = {a.kind, a.memory->get()};
  }
  AsyncSignalsHeld held;  // convolutions may run the same GEMM kernels
  DNNL_CHECK(dnnl_primitive_execute(p.get(), dnnl_context().stream.get(), n, raw));
}

}  // namespace tandem::kernels::cpu
