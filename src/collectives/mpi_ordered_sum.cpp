// The rank-ordered sum (OrderedSum in mpi_communicator.h): an all-to-all of blocks, each summed
// by its rank in rank order, then an all-gather of the sums; optionally as 16-bit codes.
#ifdef TANDEM_WITH_MPI
#include <algorithm>
#include <type_traits>

#include "collectives/mpi_communicator.h"

namespace tandem::distribute::detail {

constexpr int64_t kPiece = int64_t{1} << 28;  // MPI counts and displacements are ints: larger buffers go in pieces

void OrderedSum::run(MPI_Comm comm, float* data, int64_t count, Compression wire) {
  for (int64_t at = 0; at < count; at += kPiece) piece(comm, data + at, std::min(kPiece, count - at), wire);
}

void OrderedSum::run(MPI_Comm comm, double* data, int64_t count) {
  for (int64_t at = 0; at < count; at += kPiece)
    piece(comm, data + at, std::min(kPiece, count - at), Compression::None);
}

template <class T>
void OrderedSum::piece(MPI_Comm comm, T* data, int64_t count, Compression wire) {
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  auto n = static_cast<size_t>(size);
  auto block_begin = [&](size_t b) { return static_cast<int>(count * static_cast<int64_t>(b) / size); };
  at_.resize(n);
  len_.resize(n);
  for (size_t b = 0; b < n; ++b) {
    at_[b] = block_begin(b);
    len_[b] = block_begin(b + 1) - at_[b];
  }
  auto me = static_cast<size_t>(rank);
  int mine = len_[me];
  mine_len_.assign(n, mine);
  mine_at_.resize(n);
  for (size_t b = 0; b < n; ++b) mine_at_[b] = static_cast<int>(b) * mine;
  T* sum = data + at_[me];
  bool compressed = wire != Compression::None;
  MPI_Datatype type = compressed ? MPI_UINT16_T : std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
  size_t item = compressed ? sizeof(uint16_t) : sizeof(T);
  scratch_.resize(n * static_cast<size_t>(mine) * item + (compressed ? static_cast<size_t>(count) * item : 0));
  void* blocks = scratch_.data();  // every rank's block `me`, in rank order
  const void* send = data;
  uint16_t* codes = nullptr;  // compressed: this rank's values, then the gathered sums
  if constexpr (std::is_same_v<T, float>) {
    if (compressed) {
      codes = reinterpret_cast<uint16_t*>(scratch_.data() + n * static_cast<size_t>(mine) * item);
      to_wire(data, count, wire, codes);
      send = codes;
    }
  }
  check_mpi(MPI_Alltoallv(send, len_.data(), at_.data(), type, blocks, mine_len_.data(), mine_at_.data(), type, comm),
            "MPI_Alltoallv");
  if constexpr (std::is_same_v<T, float>) {
    if (compressed) {
      auto* from = static_cast<uint16_t*>(blocks);
      from_wire(from, mine, wire, sum);
      decoded_.resize(static_cast<size_t>(mine));
      for (size_t b = 1; b < n; ++b) {
        from_wire(from + b * static_cast<size_t>(mine), mine, wire, decoded_.data());
        for (int i = 0; i < mine; ++i) sum[i] += decoded_[static_cast<size_t>(i)];
      }
      to_wire(sum, mine, wire, codes + at_[me]);
      check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, type, codes, len_.data(), at_.data(), type, comm), "MPI_Allgatherv");
      from_wire(codes, count, wire, data);
      return;
    }
  }
  const T* from = static_cast<const T*>(blocks);
  std::copy_n(from, mine, sum);
  for (size_t b = 1; b < n; ++b)
    for (int i = 0; i < mine; ++i) sum[i] += from[b * static_cast<size_t>(mine) + static_cast<size_t>(i)];
  check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, type, data, len_.data(), at_.data(), type, comm), "MPI_Allgatherv");
}

}  // namespace tandem::distribute::detail

#endif
