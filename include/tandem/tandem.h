#pragma once
// Everything a training program needs.
#include "tandem/autograd.h"
#include "tandem/data/idx.h"
#include "tandem/error.h"
#include "tandem/layers.h"
#include "tandem/model.h"
#include "tandem/model_json.h"
#include "tandem/ops.h"
#include "tandem/optimizers.h"
#include "tandem/runtime.h"
#include "tandem/tensor.h"
#include "tandem/timeline.h"
