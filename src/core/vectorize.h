#pragma once
// TANDEM_VECTORIZE: compile a hot loop for AVX-512, AVX2 and plain x86-64, picked at load time.
// ThreadSanitizer builds go without (its runtime is not ready when the loader runs the pickers).
#ifdef TANDEM_NO_TARGET_CLONES
#define TANDEM_VECTORIZE
#else
#define TANDEM_VECTORIZE __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
