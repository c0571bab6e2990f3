#pragma once
// What a rank passes to a collective of the MPI communicator (mpi.cpp), and what the ranks expect
// next. Ranks must call the same collectives in the same order with the same sizes; a call is
// checked before MPI sees it. The first time a sequence of calls is seen, every rank's call is
// exchanged in full (an all-gather of four integers: a round trip before each collective). Then
// the call that followed those calls is expected: every rank makes the collective the expected
// call describes, with one value more that says whether its own call was another, and only if one
// was do the ranks exchange their calls in full (to name both sides). So a repeated step pays no
// round trip of its own, and a mismatched call is still named on every rank (Horovod's response
// cache does the same with its tensor names).
#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tandem/collectives/communicator.h"

namespace tandem::distribute::detail {

enum class Kind : int64_t { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier, Split };
const char* kind_name(Kind k);
const char* op_name(ReduceOp op);
MPI_Datatype mpi_type(DataType dtype);
MPI_Op mpi_op(ReduceOp op);  // a mean's is the sum
void divide(void* data, int64_t count, DataType dtype, int by);

struct Call {
  int64_t kind, dtype, count, arg;  // arg: the reduce op (+ 4 × the compression), the root, or 0
  bool operator==(const Call&) const = default;
};
std::string describe(const Call& c);
// The bytes a rank's call sends (its values; compressed: 2 bytes each).
int64_t bytes_of(const Call& c);

// The call expected after the last calls every rank agreed on: the one that followed the same
// eight calls the last time they were seen. Every rank sees the same agreed calls, so every rank
// expects the same call.
class CallCache {
 public:
  const Call* expected() const {
    auto it = next_.find(context_);
    return it == next_.end() ? nullptr : &it->second;
  }
  // `was_expected`: `c` is what expected() gave (nothing to learn).
  void agreed(const Call& c, bool was_expected) {
    if (!was_expected) {
      if (next_.size() >= kLimit) next_.clear();  // every rank clears at the same call
      next_[context_] = c;
    }
    recent_[at_++ % recent_.size()] =
        mix(static_cast<uint64_t>(c.kind) ^ mix(static_cast<uint64_t>(c.dtype)) ^
            mix(mix(static_cast<uint64_t>(c.count))) ^ mix(mix(mix(static_cast<uint64_t>(c.arg)))));
    context_ = 0;
    for (size_t i = 0; i < recent_.size(); ++i) context_ = mix(context_ ^ recent_[(at_ + i) % recent_.size()]);
  }

 private:
  static constexpr size_t kLimit = 1 << 16;
  static uint64_t mix(uint64_t x) {  // splitmix64's finalizer
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  std::array<uint64_t, 8> recent_{};  // the last calls' hashes, the oldest at at_ % 8
  size_t at_ = 0;
  uint64_t context_ = 0;  // their hash
  std::unordered_map<uint64_t, Call> next_;
};

// The check of every collective's call across the ranks of `comm`, one collective at a time.
class CallAgreement {
 public:
  // reduce: the communicator's sum (a mean's), minimum or maximum in place over the ranks;
  // name: a rank's name in messages; report: says a failure to every rank.
  CallAgreement(MPI_Comm comm, std::function<void(void*, int64_t, DataType, ReduceOp)> reduce,
                std::function<std::string(int)> name, std::function<void(const std::string&)> report);
  // Collective number `seq`, `call` on this rank: once the ranks agree, make() makes it, unless
  // the collective every rank expected was it and already ran on `data` (an all-reduce's values,
  // an all-gather's output) and `send` (an all-gather's values). A mismatch throws, naming both
  // ranks and their calls, after reporting it.
  void run(const Call& call, int64_t seq, void* data, const void* send, const std::function<void()>& make);

 private:
  static bool flaggable(const Call& c);
  bool run_flagged(const Call& shape, bool mine, void* data, const void* send);
  void exchange(const Call& call, int64_t seq);
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::function<void(void*, int64_t, DataType, ReduceOp)> reduce_;
  std::function<std::string(int)> name_;
  std::function<void(const std::string&)> report_;
  std::vector<Call> calls_;                           // every rank's call, exchanged when the ranks expect none
  CallCache cache_;                                   // the call expected next
  std::vector<char> flagged_;                         // an expected collective's values and flags
  static constexpr int64_t kFlaggedBytes = 16 << 10;  // larger calls are exchanged first (a copy costs more)
};

}  // namespace tandem::distribute::detail
