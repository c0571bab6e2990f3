// Run by tests/distribute/mpi_test.cpp under `tandem launch` (one process per rank): each scenario
// exercises the MPI communicator and prints what the test asserts on. The collective and failure
// scenarios are here; the training ones (train, custom, uneven, hvd) in mpi_check_training.cpp.
//   tandem_mpi_check SCENARIO TIMEOUT_MS
// collectives: every collective of the interface against values computed here ("rank R: ok").
// mismatch: rank 1 passes one value fewer to an all-reduce. mismatch-expected size|kind: the same
// after the ranks expect the call (mismatch_when_expected). p2p-mismatch: a receive expecting
// another count. stuck: the last rank hangs before a collective, its beats going on. die: rank 1
// kills itself (SIGKILL) after the first collective; stop: rank 1 stops itself (SIGSTOP) there.
// train LOCAL MODE: MultiWorkerMirroredStrategy (LOCAL replicas per worker) trains a dropout
// MLP and a synchronized batch-normalization CNN for two epochs; each rank compares its weights
// with the same model trained in this process alone on the same global batches (MODE "fast", or
// "bucketed" with gradients all-reduced in 256-byte buckets on the MPI thread during backward:
// the default strategy, within 1e-6 + 1e-5 × |value|; "deterministic": MirroredStrategy with one replica in
// deterministic mode, bit for bit; "frozen": the same with the first two layers frozen, whose
// variables must keep their values bit for bit while the head's train) and prints "rank R: weights match". custom LOCAL: a custom
// training loop (distribute_dataset, run, reduce) against one process's ("rank R: custom loop matches").
// uneven ROWS: rank 1 trains on ROWS rows, rank 0 on 73 (an error naming the workers and what differs).
// fusion: 64 small tensors of values of mixed magnitudes all-reduced one by one, fused into one
// buffer, and cut into other buffers, against each element summed here in rank order: the same
// bits every way; fp16 and bf16 compression against the sum of the rounded values, rounded, and
// within the format's precision of the exact sum ("rank R: fusion keeps bits"). Train mode
// "fused-bits": fit with gradients all-reduced in 256-byte buckets during backward (with a cycle
// time) against one all-reduce after backward: the same bits.
// hvd: the Horovod-style facade: allreduce, allgather (first dimensions differing), broadcast; a
// model trained by fit on each process's shard with DistributedOptimizer, BroadcastGlobalVariables
// (each process built its model from another seed) and MetricAverage against
// MultiWorkerMirroredStrategy on the same global batches, also with 2 backward passes per step
// ("rank R: hvd matches the strategy").
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "distribute/mpi_check.h"
#include "tandem/collectives/mpi.h"
#include "tandem/error.h"
#include "tandem/tandem.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::distribute;
using namespace tandem::mpi_check;

namespace {

// Every collective of the interface once: the first round exchanges every call, the next ones
// make the calls the ranks expect with the flag (mpi_calls.h).
void collectives_round(Communicator& c) {
  int r = c.rank(), n = c.size();
  // all_reduce, every op and dtype, a size that is not a multiple of anything
  std::vector<float> f(1001);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7);
  c.all_reduce(std::span<float>(f), ReduceOp::Sum);
  for (size_t i = 0; i < f.size(); ++i)
    expect(f[i] == static_cast<float>(n * (n + 1) / 2) * static_cast<float>(i % 7), "all_reduce sum float32");
  std::vector<double> d(5, r + 1.0);
  c.all_reduce(std::span<double>(d), ReduceOp::Mean);
  expect(d[4] == (n + 1) / 2.0, "all_reduce mean float64");
  std::vector<int64_t> k(3, int64_t{r} * 10);
  c.all_reduce(std::span<int64_t>(k), ReduceOp::Max);
  expect(k[0] == int64_t{n - 1} * 10, "all_reduce max int64");
  c.all_reduce(std::span<int64_t>(k), ReduceOp::Min);
  expect(k[2] == int64_t{n - 1} * 10, "all_reduce min int64");
  std::vector<float> low(4, -1.0f - static_cast<float>(r)), high(4, -1.0f - static_cast<float>(r));
  c.all_reduce(std::span<float>(low), ReduceOp::Min);
  c.all_reduce(std::span<float>(high), ReduceOp::Max);
  expect(low[3] == -static_cast<float>(n) && high[0] == -1.0f, "all_reduce min and max float32");
  // nothing at all, and no buffer for it
  c.all_reduce(nullptr, 0, DataType::Float32, ReduceOp::Sum);
  c.all_gather(nullptr, 0, nullptr, DataType::Int64);
  // grouped buffers
  std::vector<float> a(3, 1.0f), b(2, 2.0f);
  std::vector<std::span<float>> group{a, b};
  c.all_reduce(group, ReduceOp::Sum);
  expect(a[0] == static_cast<float>(n) && b[1] == 2.0f * static_cast<float>(n), "grouped all_reduce");
  // reduce_scatter: block q of rank r holds r + q
  std::vector<float> blocks(static_cast<size_t>(n) * 4), mine(4);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 4; ++i) blocks[static_cast<size_t>(q * 4 + i)] = static_cast<float>(r + q);
  c.reduce_scatter(blocks.data(), mine.data(), 4, DataType::Float32, ReduceOp::Sum);
  expect(mine[3] == static_cast<float>(n * (n - 1) / 2 + n * r), "reduce_scatter");
  // all_gather
  std::vector<int64_t> one{int64_t{r} * 3, int64_t{r} * 3 + 1}, all(static_cast<size_t>(n) * 2);
  c.all_gather(std::span<const int64_t>(one), std::span<int64_t>(all));
  for (int q = 0; q < n; ++q) expect(all[static_cast<size_t>(q) * 2 + 1] == int64_t{q} * 3 + 1, "all_gather");
  // broadcast from the last rank
  std::vector<float> bc(10, static_cast<float>(r));
  c.broadcast(std::span<float>(bc), n - 1);
  expect(bc[9] == static_cast<float>(n - 1), "broadcast");
  // a ring of sends and receives
  std::vector<double> out(6, r + 0.5), in(6, -1.0);
  auto sent = c.send_async(out.data(), 6, DataType::Float64, (r + 1) % n, 3);
  c.recv(in.data(), 6, DataType::Float64, (r + n - 1) % n, 3);
  sent->wait();
  expect(in[5] == (r + n - 1) % n + 0.5, "send/recv ring");
  // asynchronous all-reduce overlapping work on this thread
  std::vector<float> big(1 << 20, 1.0f);
  auto work = c.all_reduce_async(big.data(), static_cast<int64_t>(big.size()), DataType::Float32, ReduceOp::Sum);
  double busy = 0;
  for (int i = 0; i < 100000; ++i) busy += std::sqrt(static_cast<double>(i));
  work->wait();
  expect(busy > 0 && big.back() == static_cast<float>(n), "all_reduce_async");
  c.barrier();
}

void collectives(Communicator& c) {
  int r = c.rank(), n = c.size();
  for (int round = 0; round < 3; ++round) collectives_round(c);
  // split: even and odd ranks
  auto half = c.split(r % 2, -r);
  std::vector<float> h(2, 1.0f);
  half->all_reduce(std::span<float>(h), ReduceOp::Sum);
  expect(h[0] == static_cast<float>((n + 1 - r % 2) / 2), "split all_reduce");
  expect(half->rank() == (half->size() - 1 - r / 2), "split ranks by key");
  expect(c.split(-1, 0) == nullptr, "split with a negative color");
  expect(c.local_size() >= 1 && c.local_rank() < c.local_size(), "local rank");
  std::printf("rank %d: %s\n", r, failures == 0 ? "ok" : "FAILED");
}

// A step of four collectives, repeated until every call is expected; in step 3 every rank calls
// another size (the same on every rank: a smaller last batch), then the step goes on as before.
// After 6 steps rank 1 alone calls another size (`size`) or another collective (`kind`) where an
// all-reduce of 100 values is expected: every rank must name both calls.
void mismatch_when_expected(Communicator& c, const std::string& how) {
  int r = c.rank(), n = c.size();
  for (int step = 0; step < 6; ++step) {
    std::vector<float> g(step == 3 ? 37 : 100, 1.0f);
    c.all_reduce(std::span<float>(g));
    expect(g.back() == static_cast<float>(n), "a step's all_reduce");
    std::vector<int64_t> k(2, r), all(static_cast<size_t>(n));
    c.all_reduce(std::span<int64_t>(k), ReduceOp::Max);
    c.all_gather(std::span<const int64_t>(k.data(), 1), std::span<int64_t>(all));
    expect(k[1] == n - 1 && all.back() == n - 1, "a step's max and all_gather");
    c.barrier();
  }
  std::vector<float> g(r == 1 && how == "size" ? 99 : 100, 1.0f);
  if (r == 1 && how == "kind") c.broadcast(std::span<float>(g), 0);
  else c.all_reduce(std::span<float>(g));
  std::printf("rank %d: the mismatch went unseen\n", r);
}

// Every rank's values of the same buffer, in rank order.
std::vector<float> gather_all(Communicator& c, const std::vector<float>& mine) {
  std::vector<float> all(mine.size() * static_cast<size_t>(c.size()));
  c.all_gather(std::span<const float>(mine), std::span<float>(all));
  return all;
}

void fusion(Communicator& c) {
  int r = c.rank(), n = c.size();
  // 64 tensors of 1 to 2,900 values: small gradients (biases, small kernels), magnitudes from 1e-3 to 1e3
  std::vector<size_t> sizes, offsets;
  size_t total = 0;
  for (size_t t = 0; t < 64; ++t) {
    sizes.push_back(1 + (t * 7919) % 2900);
    offsets.push_back(total);
    total += sizes.back();
  }
  std::vector<float> mine(total);
  uint64_t state = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(r + 1);
  for (float& v : mine) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double unit = static_cast<double>(state >> 11) / 9007199254740992.0;             // [0, 1)
    double magnitude = std::pow(10.0, static_cast<double>((state >> 3) % 7) - 3.0);  // 1e-3 .. 1e3
    v = static_cast<float>((unit - 0.5) * magnitude);
  }
  std::vector<float> all = gather_all(c, mine), want(total);
  for (size_t i = 0; i < total; ++i) {
    float sum = all[i];
    for (int q = 1; q < n; ++q) sum += all[static_cast<size_t>(q) * total + i];
    want[i] = sum;
  }
  auto same_bits = [&](const std::vector<float>& got, const char* how) {
    size_t differ = 0;
    for (size_t i = 0; i < total; ++i) differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
    expect(differ == 0, fmt::format("{}: {} of {} sums differ from the rank-order sum", how, differ, total));
  };
  std::vector<float> one_by_one = mine;  // one all-reduce per tensor
  for (size_t t = 0; t < sizes.size(); ++t)
    c.all_reduce(std::span<float>(one_by_one.data() + offsets[t], sizes[t]), ReduceOp::Sum);
  same_bits(one_by_one, "one all-reduce per tensor");
  std::vector<float> fused = mine;  // one buffer
  c.all_reduce(std::span<float>(fused), ReduceOp::Sum);
  same_bits(fused, "one fused buffer");
  std::vector<float> cut = mine;  // three buffers in flight at once, cut inside tensors
  std::vector<std::unique_ptr<Work>> works;
  for (size_t from : {size_t{0}, total / 3, total / 2})
    works.push_back(c.all_reduce_async(cut.data() + from,
                                       static_cast<int64_t>((from == total / 2 ? total
                                                             : from == 0       ? total / 3
                                                                               : total / 2) -
                                                            from),
                                       DataType::Float32, ReduceOp::Sum));
  for (auto& w : works) w->wait();
  same_bits(cut, "three buffers cut anywhere");
  // Large enough for MPI's ring algorithms: still the rank-order sum.
  std::vector<float> big(1 << 21), big_want(big.size());
  for (size_t i = 0; i < big.size(); ++i) big[i] = mine[i % total] * static_cast<float>(1 + i % 5);
  {
    std::vector<float> big_all = gather_all(c, big);
    for (size_t i = 0; i < big.size(); ++i) {
      float sum = big_all[i];
      for (int q = 1; q < n; ++q) sum += big_all[static_cast<size_t>(q) * big.size() + i];
      big_want[i] = sum;
    }
  }
  c.all_reduce(std::span<float>(big), ReduceOp::Sum);
  expect(std::memcmp(big.data(), big_want.data(), big.size() * sizeof(float)) == 0, "8 MB buffer: rank-order sum");
  // Compression: the rounded values summed in float32 in rank order, rounded; within the
  // format's precision of the exact sum.
  for (auto [wire, bits] : {std::pair{Compression::Float16, 11}, std::pair{Compression::BFloat16, 8}}) {
    std::vector<float> got = mine;
    c.all_reduce_compressed(got.data(), static_cast<int64_t>(total), ReduceOp::Sum, wire);
    std::vector<float> rounded = all;
    round_to_wire(rounded.data(), static_cast<int64_t>(rounded.size()), wire);
    size_t differ = 0, outside = 0;
    for (size_t i = 0; i < total; ++i) {
      float sum = rounded[i];
      double exact = all[i], magnitude = std::fabs(all[i]);
      for (int q = 1; q < n; ++q) {
        sum += rounded[static_cast<size_t>(q) * total + i];
        exact += all[static_cast<size_t>(q) * total + i];
        magnitude += std::fabs(all[static_cast<size_t>(q) * total + i]);
      }
      round_to_wire(&sum, 1, wire);
      differ += std::memcmp(&sum, &got[i], sizeof(float)) != 0;
      // n roundings of the inputs and one of the sum, each within half a unit in the last place
      outside += std::fabs(got[i] - exact) > (n + 1) * std::ldexp(magnitude, -bits) + 1e-7;
    }
    expect(differ == 0,
           fmt::format("{}: {} sums differ from the rounded rank-order sum", compression_name(wire), differ));
    expect(outside == 0, fmt::format("{}: {} sums outside the format's precision", compression_name(wire), outside));
    std::vector<float> everyone = gather_all(c, got);  // the same bits on every rank
    for (int q = 1; q < n; ++q)
      expect(std::memcmp(everyone.data(), everyone.data() + static_cast<size_t>(q) * total, total * sizeof(float)) == 0,
             fmt::format("{}: rank {} got other bits than rank 0", compression_name(wire), q));
  }
  std::printf("rank %d: %s\n", r, failures == 0 ? "fusion keeps bits" : "fusion CHANGED bits");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tandem_mpi_check SCENARIO TIMEOUT_MS\n");
    return 2;
  }
  std::string scenario = argv[1];
  MpiOptions options;
  options.timeout = std::chrono::milliseconds(std::atoi(argv[2]));
  options.on_failure = [](const std::string& message) {
    std::fprintf(stderr, "on_failure: %s\n", message.c_str());
    std::fflush(stderr);
  };
  try {
    std::shared_ptr<Communicator> comm = make_mpi_world_communicator(options);
    int r = comm->rank(), n = comm->size();
    if (scenario == "uneven" && argc >= 4) {  // rank 1 has other data than rank 0's 73 rows
      train_uneven(comm, r == 1 ? std::atoi(argv[3]) : 73);
    } else if (scenario == "custom" && argc >= 4) {
      custom_loop_matches(comm, std::atoi(argv[3]));
    } else if (scenario == "train" && argc >= 5) {
      train_and_compare(comm, std::atoi(argv[3]), argv[4]);
    } else if (scenario == "fusion") {
      fusion(*comm);
    } else if (scenario == "hvd") {
      hvd_scenario(comm);
    } else if (scenario == "collectives") {
      collectives(*comm);
    } else if (scenario == "mismatch") {
      std::vector<float> v(r == 1 ? 99 : 100, 1.0f);
      comm->all_reduce(std::span<float>(v));
    } else if (scenario == "mismatch-expected" && argc >= 4) {
      mismatch_when_expected(*comm, argv[3]);
    } else if (scenario == "p2p-mismatch") {
      std::vector<float> v(8, 1.0f);
      if (r == 0) comm->send(v.data(), 8, DataType::Float32, 1);
      if (r == 1) comm->recv(v.data(), 7, DataType::Float32, 0);
      comm->barrier();
    } else if (scenario == "stuck" || scenario == "die" || scenario == "stop") {
      std::vector<float> v(100, 1.0f);
      comm->all_reduce(std::span<float>(v));
      if (scenario == "stuck" && r == n - 1)
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // alive, beating, never arriving
      if (scenario == "die" && r == 1) raise(SIGKILL);
      if (scenario == "stop" && r == 1) raise(SIGSTOP);
      comm->all_reduce(std::span<float>(v));
    } else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
    std::fflush(stdout);
    if (failures != 0) return 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    linger_after_failure();  // as `tandem fit` does: the others print theirs before mpirun ends them
    _exit(3);
  }
  return 0;
}
