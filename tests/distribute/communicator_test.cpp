// The in-process collectives: one handle per rank; closed forms for every collective, data type,
// reduction and asynchronous form at 1-4 ranks; identical bits on every rank; sub-groups;
// disagreement and failure reported, and no hang.
#include <thread>

#include "tandem/collectives/communicator.h"
#include "test_util.h"

namespace tandem {
namespace {

using distribute::Communicator;
using distribute::DataType;
using distribute::ReduceOp;
using Handles = std::vector<std::unique_ptr<Communicator>>;

// Runs fn(rank) on `n` threads; returns the message each one threw ("" when none).
template <typename Fn>
std::vector<std::string> on_replicas(int n, Fn fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

Handles group(int n, std::chrono::milliseconds timeout = std::chrono::minutes(1)) {
  return distribute::make_in_process_communicators(n, timeout);
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(InProcessCommunicator, HandlesKnowTheirRanks) {
  Handles comm = group(3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comm[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(comm[static_cast<size_t>(r)]->size(), 3);
    EXPECT_EQ(comm[static_cast<size_t>(r)]->local_rank(), r);  // every rank of an in-process group is local
    EXPECT_EQ(comm[static_cast<size_t>(r)]->local_size(), 3);
  }
}

TEST(InProcessCommunicator, AllReduceOfRanksIsTheClosedForm) {
  for (int n : {1, 2, 3, 4}) {
    for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) {
      Handles comm = group(n);
      std::vector<std::vector<float>> data(static_cast<size_t>(n));
      on_replicas(n, [&](int r) {
        auto& d = data[static_cast<size_t>(r)];
        d.assign(static_cast<size_t>(len), static_cast<float>(r));
        for (int64_t i = 0; i < len; ++i) d[static_cast<size_t>(i)] += static_cast<float>(i % 5);
        comm[static_cast<size_t>(r)]->all_reduce(std::span<float>(d));
      });
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < len; ++i)
          ASSERT_EQ(data[static_cast<size_t>(r)][static_cast<size_t>(i)],
                    static_cast<float>(n * (n - 1) / 2 + n * (i % 5)))
              << "replicas " << n << " length " << len << " rank " << r << " index " << i;
    }
  }
}

// Rank r contributes r + 1 + (i % 3) at index i: the sum, mean, min and max have closed forms
// exact in every data type.
template <class T>
void check_reductions(DataType dtype) {
  for (int n : {1, 2, 3, 4}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min, ReduceOp::Max}) {
      if (dtype == DataType::Int64 && op == ReduceOp::Mean) continue;
      const int64_t len = 37;
      Handles comm = group(n);
      std::vector<std::vector<T>> data(static_cast<size_t>(n)), scattered(static_cast<size_t>(n));
      expect_no_errors(on_replicas(n, [&](int r) {
        auto& d = data[static_cast<size_t>(r)];
        for (int64_t i = 0; i < len * n; ++i) d.push_back(static_cast<T>(r + 1 + i % 3));
        std::vector<T> send = d;
        scattered[static_cast<size_t>(r)].resize(static_cast<size_t>(len));
        comm[static_cast<size_t>(r)]->reduce_scatter(send.data(), scattered[static_cast<size_t>(r)].data(), len, dtype,
                                                     op);
        comm[static_cast<size_t>(r)]->all_reduce(d.data(), len * n, dtype, op);
      }));
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < len * n; ++i) {
          double extra = static_cast<double>(i % 3);
          double expected = op == ReduceOp::Sum    ? n * (n + 1) / 2.0 + n * extra
                            : op == ReduceOp::Mean ? (n + 1) / 2.0 + extra
                            : op == ReduceOp::Min  ? 1 + extra
                                                   : n + extra;
          ASSERT_EQ(static_cast<double>(data[static_cast<size_t>(r)][static_cast<size_t>(i)]), expected)
              << distribute::data_type_name(dtype) << " op " << static_cast<int>(op) << " ranks " << n << " index "
              << i;
          // reduce_scatter: rank r holds block r of the all-reduce.
          if (i / len == r)
            ASSERT_EQ(static_cast<double>(scattered[static_cast<size_t>(r)][static_cast<size_t>(i % len)]), expected)
                << "reduce_scatter " << distribute::data_type_name(dtype) << " ranks " << n;
        }
    }
  }
}

TEST(InProcessCommunicator, EveryReductionInEveryDataTypeIsTheClosedForm) {
  check_reductions<float>(DataType::Float32);
  check_reductions<double>(DataType::Float64);
  check_reductions<int64_t>(DataType::Int64);
}

TEST(InProcessCommunicator, MeanOfInt64IsRefused) {
  Handles comm = group(1);
  int64_t v = 3;
  EXPECT_TRUE(testing::throws_error([&] { comm[0]->all_reduce(&v, 1, DataType::Int64, ReduceOp::Mean); },
                                    {"mean of int64", "Sum"}));
}

TEST(InProcessCommunicator, AllGatherAndBroadcastInEveryDataType) {
  for (int n : {1, 2, 3, 4}) {
    Handles comm = group(n);
    std::vector<std::vector<int64_t>> gathered(static_cast<size_t>(n));
    std::vector<std::vector<double>> broadcast(static_cast<size_t>(n));
    std::vector<std::vector<float>> gathered_f(static_cast<size_t>(n));
    expect_no_errors(on_replicas(n, [&](int r) {
      Communicator& c = *comm[static_cast<size_t>(r)];
      std::vector<int64_t> mine{int64_t{1} << 40 | r, -r};
      gathered[static_cast<size_t>(r)].resize(static_cast<size_t>(2 * n));
      c.all_gather(std::span<const int64_t>(mine), std::span<int64_t>(gathered[static_cast<size_t>(r)]));
      std::vector<float> f{static_cast<float>(r) / 3};
      gathered_f[static_cast<size_t>(r)].resize(static_cast<size_t>(n));
      c.all_gather(std::span<const float>(f), std::span<float>(gathered_f[static_cast<size_t>(r)]));
      broadcast[static_cast<size_t>(r)].assign(3, 0.1 * r);
      c.broadcast(std::span<double>(broadcast[static_cast<size_t>(r)]), n - 1);
    }));
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < n; ++q) {
        EXPECT_EQ(gathered[static_cast<size_t>(r)][static_cast<size_t>(2 * q)], int64_t{1} << 40 | q);
        EXPECT_EQ(gathered[static_cast<size_t>(r)][static_cast<size_t>(2 * q + 1)], -q);
        EXPECT_EQ(gathered_f[static_cast<size_t>(r)][static_cast<size_t>(q)], static_cast<float>(q) / 3);
      }
      EXPECT_EQ(broadcast[static_cast<size_t>(r)], std::vector<double>(3, 0.1 * (n - 1)));
    }
  }
}

// Several buffers reduced as one collective give what one all-reduce of their concatenation
// gives, bit for bit, whatever the slice boundaries (uneven sizes, empty buffers, 1–4 replicas);
// the packing default of the interface gives the same.
TEST(InProcessCommunicator, GroupedAllReduceEqualsTheConcatenatedOne) {
  struct Packing : Communicator {  // the interface's default over the in-process single-buffer collective
    explicit Packing(std::unique_ptr<Communicator> c) : inner(std::move(c)) {}
    int rank() const override { return inner->rank(); }
    int size() const override { return inner->size(); }
    int local_rank() const override { return inner->local_rank(); }
    int local_size() const override { return inner->local_size(); }
    using Communicator::all_reduce;
    void all_reduce(void* data, int64_t n, DataType t, ReduceOp op) override { inner->all_reduce(data, n, t, op); }
    void reduce_scatter(const void* s, void* r, int64_t n, DataType t, ReduceOp op) override {
      inner->reduce_scatter(s, r, n, t, op);
    }
    void all_gather(const void* s, int64_t n, void* r, DataType t) override { inner->all_gather(s, n, r, t); }
    void broadcast(void* data, int64_t n, DataType t, int root) override { inner->broadcast(data, n, t, root); }
    void send(const void* d, int64_t n, DataType t, int peer, int tag) override { inner->send(d, n, t, peer, tag); }
    void recv(void* d, int64_t n, DataType t, int peer, int tag) override { inner->recv(d, n, t, peer, tag); }
    void barrier() override { inner->barrier(); }
    std::unique_ptr<Communicator> split(int color, int key) override { return inner->split(color, key); }
    void abort(const std::string& reason) override { inner->abort(reason); }
    std::unique_ptr<Communicator> inner;
  };
  const std::vector<size_t> sizes = {5, 0, 1, 1000, 3, 77};
  for (int n : {1, 2, 3, 4}) {
    for (bool packing : {false, true}) {
      Handles grouped = group(n), flat = group(n);
      if (packing)
        for (auto& h : grouped) h = std::make_unique<Packing>(std::move(h));
      std::vector<std::vector<float>> concatenated(static_cast<size_t>(n)), regrouped(static_cast<size_t>(n));
      on_replicas(n, [&](int r) {
        std::vector<float> all = testing::random_tensor({1086}, 40 + static_cast<uint64_t>(r)).to_vector();
        std::vector<std::vector<float>> parts;
        size_t at = 0;
        for (size_t size : sizes) {
          parts.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                             all.begin() + static_cast<std::ptrdiff_t>(at + size));
          at += size;
        }
        std::vector<std::span<float>> buffers(parts.begin(), parts.end());
        grouped[static_cast<size_t>(r)]->all_reduce(buffers, ReduceOp::Sum);
        flat[static_cast<size_t>(r)]->all_reduce(std::span<float>(all));
        concatenated[static_cast<size_t>(r)] = all;
        for (const auto& p : parts)
          regrouped[static_cast<size_t>(r)].insert(regrouped[static_cast<size_t>(r)].end(), p.begin(), p.end());
      });
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(regrouped[static_cast<size_t>(r)], concatenated[0])
            << n << " replicas, rank " << r << (packing ? ", packing" : "");
    }
  }
}

TEST(InProcessCommunicator, GroupedAllReduceNamesMismatchedBuffers) {
  Handles comm = group(2);
  auto errors = on_replicas(2, [&](int r) {
    std::vector<float> a(4), b(r == 0 ? 6 : 2), c(r == 0 ? 0 : 4);
    std::vector<std::span<float>> buffers{a, b, c};
    comm[static_cast<size_t>(r)]->all_reduce(buffers, ReduceOp::Sum);
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("mismatched buffers"), std::string::npos) << e;
}

TEST(InProcessCommunicator, FloatSumsAreBitwiseIdenticalAcrossReplicas) {
  const int n = 3;
  const int64_t len = 4099;
  Handles comm = group(n);
  std::vector<std::vector<float>> data(n);
  on_replicas(n, [&](int r) {
    Tensor t = testing::random_tensor({len}, 10 + static_cast<uint64_t>(r));
    data[static_cast<size_t>(r)] = t.to_vector();
    comm[static_cast<size_t>(r)]->all_reduce(std::span<float>(data[static_cast<size_t>(r)]));
  });
  EXPECT_EQ(data[0], data[1]);
  EXPECT_EQ(data[1], data[2]);
}

TEST(InProcessCommunicator, BroadcastAndBarrier) {
  Handles comm = group(3);
  std::vector<std::vector<float>> data(3);
  on_replicas(3, [&](int r) {
    data[static_cast<size_t>(r)].assign(5, static_cast<float>(r + 1));
    comm[static_cast<size_t>(r)]->broadcast(std::span<float>(data[static_cast<size_t>(r)]), 2);
    comm[static_cast<size_t>(r)]->barrier();
  });
  for (auto& d : data) EXPECT_EQ(d, std::vector<float>(5, 3.0f));
}

// Messages between two ranks with one tag arrive in order; tags keep streams apart.
TEST(InProcessCommunicator, SendAndRecvKeepOrderPerTag) {
  for (int n : {2, 3, 4}) {
    Handles comm = group(n);
    std::vector<std::vector<double>> got(static_cast<size_t>(n));
    expect_no_errors(on_replicas(n, [&](int r) {
      Communicator& c = *comm[static_cast<size_t>(r)];
      int next = (r + 1) % n, previous = (r + n - 1) % n;
      for (int k = 0; k < 3; ++k) {
        double v[2] = {static_cast<double>(r), static_cast<double>(k)};
        c.send(v, 2, DataType::Float64, next, /*tag=*/7);
      }
      int64_t other = 100 + r;
      c.send(&other, 1, DataType::Int64, next, /*tag=*/8);
      int64_t tagged = 0;
      c.recv(&tagged, 1, DataType::Int64, previous, 8);  // the later tag first: no mix-up
      got[static_cast<size_t>(r)].push_back(static_cast<double>(tagged));
      for (int k = 0; k < 3; ++k) {
        double v[2];
        c.recv(v, 2, DataType::Float64, previous, 7);
        got[static_cast<size_t>(r)].push_back(v[0]);
        got[static_cast<size_t>(r)].push_back(v[1]);
      }
    }));
    for (int r = 0; r < n; ++r) {
      double p = (r + n - 1) % n;
      EXPECT_EQ(got[static_cast<size_t>(r)], (std::vector<double>{100 + p, p, 0, p, 1, p, 2})) << "rank " << r;
    }
  }
}

TEST(InProcessCommunicator, ARecvOfAnotherSizeOrTypeNamesBoth) {
  Handles comm = group(2);
  float f[3] = {1, 2, 3};
  comm[0]->send(f, 3, DataType::Float32, 1);
  double d[4];
  EXPECT_TRUE(testing::throws_error([&] { comm[1]->recv(d, 4, DataType::Float64, 0); },
                                    {"expected 4 doubles from replica 0", "sent 3 floats"}));
  EXPECT_TRUE(
      testing::throws_error([&] { comm[0]->send(f, 3, DataType::Float32, 2); }, {"rank 2 out of range [0, 2)"}));
}

// The asynchronous forms give the synchronous results once waited on; a receive posted before
// its send does not block the rank that posted it.
TEST(InProcessCommunicator, AsynchronousFormsCompleteOnWait) {
  for (int n : {1, 2, 3, 4}) {
    Handles comm = group(n);
    std::vector<std::vector<float>> reduced(static_cast<size_t>(n)), gathered(static_cast<size_t>(n)),
        scattered(static_cast<size_t>(n)), broadcast(static_cast<size_t>(n));
    std::vector<int64_t> received(static_cast<size_t>(n));
    expect_no_errors(on_replicas(n, [&](int r) {
      Communicator& c = *comm[static_cast<size_t>(r)];
      auto u = static_cast<size_t>(r);
      int64_t incoming = -1, outgoing = 10 * r;
      auto recv = c.recv_async(&incoming, 1, DataType::Int64, (r + n - 1) % n, 3);
      EXPECT_FALSE(recv->done());
      auto send = c.send_async(&outgoing, 1, DataType::Int64, (r + 1) % n, 3);
      reduced[u].assign(static_cast<size_t>(n), static_cast<float>(r));
      auto all_reduce = c.all_reduce_async(reduced[u].data(), n, DataType::Float32, ReduceOp::Max);
      float mine = static_cast<float>(r);
      gathered[u].resize(static_cast<size_t>(n));
      auto all_gather = c.all_gather_async(&mine, 1, gathered[u].data(), DataType::Float32);
      std::vector<float> blocks(static_cast<size_t>(n), 1.0f);
      scattered[u].resize(1);
      auto reduce_scatter =
          c.reduce_scatter_async(blocks.data(), scattered[u].data(), 1, DataType::Float32, ReduceOp::Sum);
      broadcast[u].assign(2, static_cast<float>(r));
      auto bcast = c.broadcast_async(broadcast[u].data(), 2, DataType::Float32, 0);
      auto barrier = c.barrier_async();
      for (auto* w : {&send, &all_reduce, &all_gather, &reduce_scatter, &bcast, &barrier, &recv}) (*w)->wait();
      EXPECT_TRUE(recv->done());
      received[u] = incoming;
    }));
    for (int r = 0; r < n; ++r) {
      auto u = static_cast<size_t>(r);
      EXPECT_EQ(reduced[u], std::vector<float>(static_cast<size_t>(n), static_cast<float>(n - 1)));
      for (int q = 0; q < n; ++q) EXPECT_EQ(gathered[u][static_cast<size_t>(q)], static_cast<float>(q));
      EXPECT_EQ(scattered[u][0], static_cast<float>(n));
      EXPECT_EQ(broadcast[u], std::vector<float>(2, 0.0f));
      EXPECT_EQ(received[u], 10 * ((r + n - 1) % n));
    }
  }
}

TEST(InProcessCommunicator, AnAsynchronousFormRethrowsOnWait) {
  Handles comm = group(2, std::chrono::milliseconds(200));
  float v = 1;
  auto work = comm[0]->all_reduce_async(&v, 1, DataType::Float32, ReduceOp::Sum);  // rank 1 never comes
  EXPECT_TRUE(testing::throws_error([&] { work->wait(); }, {"timed out", "1 of 2 arrived"}));
}

// split(color, key): ranks of one color form a group ranked by key; collectives in the
// sub-groups run side by side; a negative color joins none.
TEST(InProcessCommunicator, SplitMakesSubGroupsRankedByKey) {
  for (int n : {1, 2, 3, 4}) {
    Handles comm = group(n);
    std::vector<int> sub_rank(static_cast<size_t>(n)), sub_size(static_cast<size_t>(n));
    std::vector<float> sums(static_cast<size_t>(n));
    std::vector<char> none(static_cast<size_t>(n));  // not vector<bool>: each thread writes its own byte
    expect_no_errors(on_replicas(n, [&](int r) {
      Communicator& c = *comm[static_cast<size_t>(r)];
      std::unique_ptr<Communicator> sub = c.split(r % 2, -r);  // by parity, in reverse order
      sub_rank[static_cast<size_t>(r)] = sub->rank();
      sub_size[static_cast<size_t>(r)] = sub->size();
      float v = static_cast<float>(r);
      sub->all_reduce(std::span<float>(&v, 1));
      sums[static_cast<size_t>(r)] = v;
      std::unique_ptr<Communicator> solo = c.split(r == 0 ? 0 : -1, 0);  // rank 0 alone; the rest in none
      none[static_cast<size_t>(r)] = solo == nullptr;
      if (solo) solo->barrier();
      c.barrier();  // the parent still works
    }));
    for (int r = 0; r < n; ++r) {
      auto u = static_cast<size_t>(r);
      int same = 0, after = 0, sum = 0;  // ranks of this parity; those after r (smaller key = -r later)
      for (int q = r % 2; q < n; q += 2) {
        ++same;
        sum += q;
        if (q > r) ++after;
      }
      EXPECT_EQ(sub_size[u], same) << "rank " << r;
      EXPECT_EQ(sub_rank[u], after) << "rank " << r;
      EXPECT_EQ(sums[u], static_cast<float>(sum)) << "rank " << r;
      EXPECT_EQ(none[u] != 0, r != 0);
    }
  }
}

TEST(InProcessCommunicator, MismatchedSizesNameBothSides) {
  Handles comm = group(2, std::chrono::milliseconds(2000));
  auto errors = on_replicas(2, [&](int r) {
    std::vector<float> d(static_cast<size_t>(r == 0 ? 10 : 12));
    comm[static_cast<size_t>(r)]->all_reduce(std::span<float>(d));
  });
  EXPECT_NE(errors[0].find("mismatched sizes: replica 0 passed 10 floats, but replica 1 passed 12"), std::string::npos)
      << errors[0];
}

TEST(InProcessCommunicator, AFailingReplicaStopsTheOthers) {
  Handles comm = group(3);
  auto errors = on_replicas(3, [&](int r) {
    std::vector<float> d(100, 1.0f);
    if (r == 1) {
      comm[1]->abort("bad input in its shard");
      return;
    }
    if (r == 2) {  // a rank waiting for a message is woken too
      comm[2]->recv(d.data(), 100, DataType::Float32, 1);
      return;
    }
    comm[static_cast<size_t>(r)]->all_reduce(std::span<float>(d));
  });
  EXPECT_NE(errors[0].find("replica 1 failed: bad input in its shard"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("replica 1 failed: bad input in its shard"), std::string::npos) << errors[2];
}

TEST(InProcessCommunicator, AMissingReplicaTimesOut) {
  Handles comm = group(2, std::chrono::milliseconds(200));
  std::vector<float> d(4, 1.0f);
  EXPECT_TRUE(testing::throws_error([&] { comm[0]->all_reduce(std::span<float>(d)); },
                                    {"timed out", "replica 0 waited 200 ms", "1 of 2 arrived"}));
  EXPECT_TRUE(
      testing::throws_error([&] { comm[0]->broadcast(std::span<float>(d), 5); }, {"rank 5 out of range [0, 2)"}));
  Handles lonely = group(2, std::chrono::milliseconds(200));
  EXPECT_TRUE(testing::throws_error([&] { lonely[1]->recv(d.data(), 4, DataType::Float32, 0, 9); },
                                    {"timed out", "replica 1 waited 200 ms in recv", "from replica 0 (tag 9)"}));
}

}  // namespace
}  // namespace tandem
