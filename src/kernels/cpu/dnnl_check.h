#pragma once
// DNNL_CHECK: turns a failed oneDNN call into a tandem::Error with the call site and status.
#include <dnnl.h>

#include "tandem/error.h"

#define DNNL_CHECK(call)                                                                                      \
  do {                                                                                                        \
    dnnl_status_t status_ = (call);                                                                           \
    if (status_ != dnnl_success)                                                                              \
      ::tandem::fail("oneDNN: {} failed with status {} at {}:{}", #call, static_cast<int>(status_), __FILE__, \
                     __LINE__);                                                                               \
  } while (0)
