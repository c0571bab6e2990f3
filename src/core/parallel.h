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

// Chunk sizes, measured with oneDNN's sgemm on one core: a call costs ~1.5 µs of its own, so 2-4
// chunks of a 2.5-13 MFLOP product cost 1-8% more than one call, 16 chunks of a 64 MFLOP one 3%.
// A chunk has at least kMinChunkWork operations; more than kFewChunks chunks only when each has
// at least kLargeChunkWork.
inline constexpr double kMinChunkWork = 1.0e6;
inline constexpr double kLargeChunkWork = 4.0e6;
inline constexpr int64_t kFewChunks = 4;
inline constexpr int64_t kMaxChunks = 16;
// The least work per thread that pays for one more (~10 µs on one core: several hand-offs to a
// spinning helper; measured: a 50x160x160 product, 2.6 MFLOP, ran 1.6-1.8x faster on 2 threads).
inline constexpr double kMinWorkPerThread = 1.0e6;

// How many chunks to cut `units` (rows, columns, images) holding `work` operations into (see the
// constants above; 1, 2 or a multiple of 4), each at least `granule` units. Depends on the shape
// only.
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
  run_chunks(
      chunks, work, [](const void* context, int64_t c) { (*static_cast<const F*>(context))(c); }, &f);
}

// Sets the calling thread's OpenMP (and so oneDNN) to one thread, once: parallelism is the
// pool's. Called before a oneDNN primitive is made or run (one made at more threads would open
// an OpenMP team of its own).
void single_threaded_openmp();

// The threads run_chunks would use for this work now (for tests and tandem fit --verbose 2).
int threads_for(int64_t chunks, double work);

}  // namespace tandem::core
