#pragma once
// The logical GPUs' table (devices.cpp, set by cuda::set_logical_devices): which card device
// cuda:index is on, and its share of the card's memory.
#include <cstdint>
#include <optional>

namespace tandem::cuda {

struct LogicalGpu {
  int physical = 0;
  int64_t memory_limit_bytes = 0;  // 0: none of its own
};
// cuda:index's card and limit; nullopt past the last device (or with no GPU).
std::optional<LogicalGpu> logical_gpu(int index);
// Whether a GPU has been made (a tensor was placed on one; gpu.cpp, built with a toolkit only).
bool any_gpu_made();

}  // namespace tandem::cuda
