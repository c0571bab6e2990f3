// The all-reduce of Tandem's MPI communicator beside a bare MPI_Allreduce loop on the same
// buffers, in one run: rounds alternate between the two, each round the best of `repetitions`
// calls; prints the best round of each and its spread (best to worst round), and the mean of
// every call of Tandem's. With TENSORS > 1 the buffer is cut into that many tensors, each
// all-reduced by its own call (Tandem's per-tensor all-reduce against a loop of MPI_Allreduce):
// what a call costs beyond MPI's own when the calls are small.
// Usage: tandem launch -np 2 -- bench_mpi_allreduce [megabytes] [repetitions] [rounds] [tensors]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "slowest_rank.h"
#include "tandem/collectives/mpi.h"
#include "tandem/error.h"

int main(int argc, char** argv) try {
  double megabytes = argc > 1 ? std::atof(argv[1]) : 10.0;
  int repetitions = argc > 2 ? std::atoi(argv[2]) : 20;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  int tensors = argc > 4 ? std::max(1, std::atoi(argv[4])) : 1;
  auto n = static_cast<int64_t>(megabytes * 1e6 / 4) / tensors * tensors;
  int64_t each = n / tensors;
  auto comm = tandem::distribute::make_mpi_world_communicator();
  std::vector<float> buffer(static_cast<size_t>(n), 1.0f);
  // Each call's time as the slowest rank saw it.
  auto time_one = [&](auto&& call) {
    std::fill(buffer.begin(), buffer.end(), 0.5f + static_cast<float>(comm->rank()));
    return slowest_rank_seconds(call);
  };
  auto bare = [&] {
    for (int64_t at = 0; at < n; at += each)
      MPI_Allreduce(MPI_IN_PLACE, buffer.data() + at, static_cast<int>(each), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  auto ours = [&] {
    for (int64_t at = 0; at < n; at += each) comm->all_reduce(std::span<float>(buffer.data() + at, each));
  };

  std::vector<double> bare_rounds, our_rounds;
  double our_total = 0;  // every call of ours, for the mean (what a training run pays on average)
  for (int round = 0; round < rounds; ++round)
    for (int which = 0; which < 2; ++which) {
      double best = 1e9;
      for (int i = 0; i < repetitions; ++i) {
        double t = which == 0 ? time_one(bare) : time_one(ours);
        best = std::min(best, t);
        if (which == 1) our_total += t;
      }
      (which == 0 ? bare_rounds : our_rounds).push_back(best);
    }
  if (buffer[0] != 0.5f * static_cast<float>(comm->size()) + static_cast<float>(comm->size() * (comm->size() - 1) / 2))
    tandem::fail("bench_mpi_allreduce: the sum is wrong ({})", buffer[0]);
  if (comm->rank() == 0) {
    auto [bare_best, bare_worst] = std::minmax_element(bare_rounds.begin(), bare_rounds.end());
    auto [our_best, our_worst] = std::minmax_element(our_rounds.begin(), our_rounds.end());
    std::printf(
        "{\"ranks\": %d, \"megabytes\": %.3f, \"tensors\": %d, \"mpi_allreduce_ms\": %.3f, "
        "\"mpi_allreduce_spread_ms\": %.3f, "
        "\"tandem_all_reduce_ms\": %.3f, \"tandem_all_reduce_spread_ms\": %.3f, \"tandem_all_reduce_mean_ms\": %.3f, "
        "\"fraction_of_mpi\": %.3f}\n",
        comm->size(), megabytes, tensors, *bare_best * 1e3, (*bare_worst - *bare_best) * 1e3, *our_best * 1e3,
        (*our_worst - *our_best) * 1e3, our_total / (rounds * repetitions) * 1e3, *bare_best / *our_best);
  }
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
