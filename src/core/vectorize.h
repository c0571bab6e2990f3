#pragma once
// TANDEM_VECTORIZE: compile a hot loop for AVX-512, AVX2 and plain x86-64, picked at load time.
// The two vector levels are x86-64-v4 and -v3, which both have FMA at every vector width (and
// scalar): a fused multiply-add written out (std::fma) stays one instruction in a vector lane and
// in the loop's tail alike; plain x86-64 calls the library's. ThreadSanitizer builds go without
// (its runtime is not ready when the loader runs the pickers).
#ifdef TANDEM_NO_TARGET_CLONES
#define TANDEM_VECTORIZE
#else
#define TANDEM_VECTORIZE __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
