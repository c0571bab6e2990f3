// The check of each collective's call across the ranks (CallAgreement in mpi_calls.h), and what
// the MPI communicator and it share: a call's description, MPI's types and operations.
#ifdef TANDEM_WITH_MPI
#include "collectives/mpi_calls.h"

#include <cstring>

#include "collectives/mpi_communicator.h"
#include "tandem/error.h"

namespace tandem::distribute::detail {

const char* kind_name(Kind k) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "split"};
  return names[static_cast<int>(k)];
}

MPI_Datatype mpi_type(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return MPI_FLOAT;
    case DataType::Float64: return MPI_DOUBLE;
    case DataType::Int64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return MPI_SUM;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
  }
  return MPI_OP_NULL;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

void divide(void* data, int64_t count, DataType dtype, int by) {
  if (dtype == DataType::Float32)
    for (float* p = static_cast<float*>(data); count-- > 0; ++p) *p /= static_cast<float>(by);
  else if (dtype == DataType::Float64)
    for (double* p = static_cast<double*>(data); count-- > 0; ++p) *p /= static_cast<double>(by);
}

std::string describe(const Call& c) {
  auto kind = static_cast<Kind>(c.kind);
  if (kind == Kind::Barrier || kind == Kind::Split) return kind_name(kind);
  std::string what =
      fmt::format("{} of {} {} values", kind_name(kind), c.count, data_type_name(static_cast<DataType>(c.dtype)));
  if (kind == Kind::Broadcast) return what + fmt::format(" from rank {}", c.arg);
  if (kind == Kind::AllReduce && c.arg >= 4)
    return what + fmt::format(" ({}, {} on the wire)", op_name(static_cast<ReduceOp>(c.arg % 4)),
                              compression_name(static_cast<Compression>(c.arg / 4)));
  if (kind != Kind::AllGather) return what + fmt::format(" ({})", op_name(static_cast<ReduceOp>(c.arg)));
  return what;
}

int64_t bytes_of(const Call& c) {
  return c.count * (c.arg >= 4 && static_cast<Kind>(c.kind) == Kind::AllReduce
                        ? 2
                        : static_cast<int64_t>(data_type_size(static_cast<DataType>(c.dtype))));
}

CallAgreement::CallAgreement(MPI_Comm comm, std::function<void(void*, int64_t, DataType, ReduceOp)> reduce,
                             std::function<std::string(int)> name, std::function<void(const std::string&)> report)
    : comm_(comm), reduce_(std::move(reduce)), name_(std::move(name)), report_(std::move(report)) {
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

// As the expected collective with a flag where every rank expects one it may make so, else after
// an exchange of every rank's call.
void CallAgreement::run(const Call& call, int64_t seq, void* data, const void* send,
                        const std::function<void()>& make) {
  if (const Call* expected = cache_.expected(); expected != nullptr && flaggable(*expected)) {
    Call shape = *expected;
    if (run_flagged(shape, shape == call, data, send)) {
      cache_.agreed(call, true);
      return;
    }
  }
  exchange(call, seq);
  cache_.agreed(call, false);
  make();
}

bool CallAgreement::flaggable(const Call& c) {
  auto kind = static_cast<Kind>(c.kind);
  return kind == Kind::Barrier ||
         ((kind == Kind::AllGather || (kind == Kind::AllReduce && c.arg < 4)) && bytes_of(c) <= kFlaggedBytes);
}

// Makes the collective `shape` describes, on this rank's values where its call is that one (`mine`;
// else on zeros), with one value more per rank: whether the rank's call differs. True when none
// did; then `data` has the results. Else nothing of this rank's was touched.
bool CallAgreement::run_flagged(const Call& shape, bool mine, void* data, const void* send) {
  int64_t differs = mine ? 0 : 1;
  auto kind = static_cast<Kind>(shape.kind);
  if (kind == Kind::Barrier) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &differs, 1, MPI_INT64_T, MPI_MAX, comm_), "MPI_Allreduce");
    return differs == 0;
  }
  auto dtype = static_cast<DataType>(shape.dtype);
  size_t width = data_type_size(dtype), n = static_cast<size_t>(shape.count), row = (n + 1) * width;
  auto put_flag = [&](char* at, int64_t value) {
    if (dtype == DataType::Float32) *reinterpret_cast<float*>(at) = static_cast<float>(value);
    else if (dtype == DataType::Float64) *reinterpret_cast<double*>(at) = static_cast<double>(value);
    else *reinterpret_cast<int64_t*>(at) = value;
  };
  auto flag_at = [&](const char* at) {
    if (dtype == DataType::Float32) return *reinterpret_cast<const float*>(at) != 0.0f;
    if (dtype == DataType::Float64) return *reinterpret_cast<const double*>(at) != 0.0;
    return *reinterpret_cast<const int64_t*>(at) != 0;
  };
  if (kind == Kind::AllReduce) {
    auto op = static_cast<ReduceOp>(shape.arg);
    flagged_.resize(row);
    if (mine && n > 0) std::memcpy(flagged_.data(), data, n * width);
    else std::memset(flagged_.data(), 0, n * width);
    put_flag(flagged_.data() + n * width, op == ReduceOp::Min ? -differs : differs);  // any nonzero survives
    reduce_(flagged_.data(), shape.count + 1, dtype, op);
    if (flag_at(flagged_.data() + n * width)) return false;
    if (n > 0) std::memcpy(data, flagged_.data(), n * width);
    if (op == ReduceOp::Mean) divide(data, shape.count, dtype, size_);
    return true;
  }
  auto ranks = static_cast<size_t>(size_);
  flagged_.resize(row * (ranks + 1));
  char* out = flagged_.data();
  char* in = out + row;
  if (mine && n > 0) std::memcpy(out, send, n * width);
  else std::memset(out, 0, n * width);
  put_flag(out + n * width, differs);
  check_mpi(
      MPI_Allgather(out, static_cast<int>(n + 1), mpi_type(dtype), in, static_cast<int>(n + 1), mpi_type(dtype), comm_),
      "MPI_Allgather");
  for (size_t r = 0; r < ranks; ++r)
    if (flag_at(in + r * row + n * width)) return false;
  for (size_t r = 0; r < ranks && n > 0; ++r)  // (an all-gather of nothing may pass no buffer)
    std::memcpy(static_cast<char*>(data) + r * n * width, in + r * row, n * width);
  return true;
}

// Every rank's call, compared: a rank that differs is named with its call beside this one's.
void CallAgreement::exchange(const Call& call, int64_t seq) {
  calls_.resize(static_cast<size_t>(size_));
  check_mpi(MPI_Allgather(&call, 4, MPI_INT64_T, calls_.data(), 4, MPI_INT64_T, comm_), "MPI_Allgather");
  for (int r = 0; r < size_; ++r) {
    if (calls_[static_cast<size_t>(r)] == call) continue;
    int low = std::min(r, rank_), high = std::max(r, rank_);
    std::string message = fmt::format("ranks disagree at collective #{}: {} calls {}, {} calls {}", seq, name_(low),
                                      describe(calls_[static_cast<size_t>(low)]), name_(high),
                                      describe(calls_[static_cast<size_t>(high)]));
    report_(message);
    fail("{}", message);
  }
}

}  // namespace tandem::distribute::detail

#endif
