#include "tandem/runtime.h"

#include <omp.h>

#include "tandem/error.h"

namespace tandem {

void set_num_threads(int threads) {
  if (threads < 1) fail("set_num_threads: threads must be at least 1, got {}", threads);
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace tandem
