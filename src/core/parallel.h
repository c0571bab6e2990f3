#pragma once
// parallel_for: an op's work as chunks, run on the calling thread's intra-op threads.
//
// The op chooses its chunks from its shape alone (split_chunks), each chunk writing its own part
// of the output, so the bits never depend on how many threads ran them. How many threads do run
// is decided per call: at most the thread ceiling (num_threads()) and the cores other processes
// leave free, and only as many as the op's work keeps busy (kMinWorkPerThread each); one thread
// runs every chunk in order on the calling thread with no hand-off at all.
#include <cstdint>

namespace tandem::core {

inline constexpr int64_t kMaxChunks = 16;
// The smallest chunk worth making, in floating-point operations (about 10 µs on one core).
inline constexpr double kMinChunkWork = 1.0e6;
// The least work that pays for one more thread: the hand-off to a helper (a wake-up when it
// sleeps) costs about as much as this work on one core.
inline constexpr double kMinWorkPerThread = 2.0e6;

// How many chunks to cut `units` (rows, columns, images) holding `work` operations into: as many
// as keep each at least kMinChunkWork and `granule` units, at most kMaxChunks. Depends on the
// shape only.
int64_t split_chunks(int64_t units, double work, int64_t granule = 1);
// The [begin, end) units of chunk c of `chunks` over `units`, in multiples of `granule`.
struct Range {
  int64_t begin, end;
};
Range chunk_range(int64_t units, int64_t chunks, int64_t c, int64_t granule = 1);

using ChunkFn = void (*)(const void* context, int64_t chunk);
void run_chunks(int64_t chunks, double work, ChunkFn fn, const void* context);

template <class F>
void parallel_for(int64_t chunks, double work, const F& f) {
  run_chunks(chunks, work, [](const void* context, int64_t c) { (*static_cast<const F*>(context))(c); }, &f);
}

// The threads run_chunks would use for this work now (for tests and tandem fit --verbose 2).
int threads_for(int64_t chunks, double work);

}  // namespace tandem::core
