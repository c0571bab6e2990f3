#pragma once
// Everything a training program needs.
#include "tandem/autograd.h"
#include "tandem/cuda.h"
#include "tandem/data/idx.h"
#include "tandem/error.h"
#include "tandem/graph.h"
#include "tandem/layers.h"
#include "tandem/model.h"
#include "tandem/model_json.h"
#include "tandem/ops.h"
#include "tandem/optimizers.h"
#include "tandem/runtime.h"
#include "tandem/tensor.h"
#include "tandem/timeline.h"

namespace tandem::detail {
// Device::cuda(i) works in every program that includes this header (a no-op without CUDA).
inline const bool cuda_registered = cuda::registered();
}  // namespace tandem::detail
