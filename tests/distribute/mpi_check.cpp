// Run by tests/distribute/mpi_test.cpp under `tandem launch` (one process per rank): each scenario
// exercises the MPI communicator and prints what the test asserts on.
//   tandem_mpi_check SCENARIO TIMEOUT_MS
// collectives: every collective of the interface against values computed here ("rank R: ok").
// mismatch: rank 1 passes one value fewer to an all-reduce. p2p-mismatch: a receive expecting
// another count. stuck: the last rank hangs before a collective, its beats going on. die: rank 1
// kills itself (SIGKILL) after the first collective; stop: rank 1 stops itself (SIGSTOP) there.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tandem/collectives/mpi.h"
#include "tandem/error.h"

using namespace tandem;
using namespace tandem::distribute;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank check failed: %s\n", what.c_str());
    ++failures;
  }
}

void collectives(Communicator& c) {
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
    auto comm = make_mpi_world_communicator(options);
    int r = comm->rank(), n = comm->size();
    if (scenario == "collectives") {
      collectives(*comm);
    } else if (scenario == "mismatch") {
      std::vector<float> v(r == 1 ? 99 : 100, 1.0f);
      comm->all_reduce(std::span<float>(v));
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
    _exit(3);
  }
  return 0;
}
