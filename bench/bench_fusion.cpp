// Tensor fusion: the gradients of a 32-layer MLP of width 64 (64 small tensors: 32 kernels of
// 64 × 64 and 32 biases of 64, 532 KB in all) averaged over the ranks four ways, in one run:
//   fused       hvd::DistributedOptimizer's reduction (packed into one fusion buffer, one
//               all-reduce on the MPI communicator, unpacked);
//   one buffer  one all-reduce of their total size (the floor fusion aims at);
//   per tensor  one bare MPI_Allreduce per tensor (fusion's alternative);
//   ours/tensor one all-reduce of Tandem's communicator per tensor.
// Rounds alternate between them; each round is the best of `repetitions` calls (a call's time as
// the slowest rank saw it); prints the best round of each with its spread, and the two ratios.
// Usage: tandem launch -np 2 -- bench_fusion [repetitions] [rounds] [width] [layers]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "slowest_rank.h"
#include "tandem/distribute/per_process.h"
#include "tandem/hvd.h"
#include "tandem/optimizers.h"

using namespace tandem;

int main(int argc, char** argv) try {
  int repetitions = argc > 1 ? std::atoi(argv[1]) : 50;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  int64_t width = argc > 3 ? std::atoi(argv[3]) : 64;
  int layers = argc > 4 ? std::atoi(argv[4]) : 32;
  hvd::Context& ctx = hvd::init();
  std::vector<Variable> variables;
  std::vector<Tensor> gradients;
  int64_t total = 0;
  for (int l = 0; l < layers; ++l)
    for (Shape shape : {Shape{width, width}, Shape{width}}) {
      gradients.push_back(Tensor::full(shape, 0.25f + static_cast<float>(ctx.rank())));
      variables.push_back(Variable{.name = "v", .value = Tensor::zeros(shape)});
      total += shape.numel();
    }
  std::vector<Variable*> pointers;
  for (Variable& v : variables) pointers.push_back(&v);
  auto optimizer = hvd::DistributedOptimizer(std::make_unique<optimizers::SGD>(0.1f));
  auto& fusion = dynamic_cast<distribute::PerProcessUpdate&>(*optimizer->route());
  std::vector<std::vector<float>> buffers;
  for (const Tensor& g : gradients) buffers.push_back(g.to_vector());
  std::vector<float> whole(static_cast<size_t>(total), 1.0f);

  auto fused = [&] { fusion.reduce(pointers, gradients); };
  auto one = [&] { ctx.communicator().all_reduce(std::span<float>(whole)); };
  auto bare = [&] {
    for (auto& b : buffers)
      MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(b.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  auto ours = [&] {
    for (auto& b : buffers) ctx.communicator().all_reduce(std::span<float>(b));
  };
  std::vector<double> results[4];
  for (int round = 0; round < rounds; ++round) {
    int m = 0;
    for (std::function<void()> call : {std::function<void()>(fused), std::function<void()>(one),
                                       std::function<void()>(bare), std::function<void()>(ours)}) {
      double best = 1e300;
      for (int i = 0; i < repetitions; ++i) best = std::min(best, slowest_rank_seconds(call));
      results[m++].push_back(best);
    }
  }
  if (ctx.rank() == 0) {
    const char* names[] = {"fused (hvd::DistributedOptimizer)", "one all-reduce of the total",
                           "one bare MPI_Allreduce per tensor", "one Tandem all-reduce per tensor"};
    double best[4];
    std::printf("%zu tensors, %lld floats (%.0f KB), %d ranks; ms per reduction, best of %d rounds of %d\n",
                gradients.size(), static_cast<long long>(total), total * 4 / 1024.0, ctx.size(), rounds, repetitions);
    for (int m = 0; m < 4; ++m) {
      auto [lo, hi] = std::minmax_element(results[m].begin(), results[m].end());
      best[m] = *lo;
      std::printf("  %-36s %8.3f ms (spread %.3f)\n", names[m], *lo * 1e3, (*hi - *lo) * 1e3);
    }
    std::printf("fused ÷ one all-reduce: %.2f (target <= 1.2); per-tensor MPI ÷ fused: %.1f (target >= 5)\n",
                best[0] / best[1], best[2] / best[0]);
  }
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
