#pragma once
// Process-level knobs of the CPU runtime.

namespace tandem {

// Intra-op threads used by the kernels run from the calling thread (oneDNN and loops).
void set_num_threads(int threads);
int num_threads();

}  // namespace tandem
