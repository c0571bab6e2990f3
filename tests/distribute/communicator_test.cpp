// The in-process collectives: closed forms, identical bits on every replica, disagreement and
// failure reported, and no hang.
#include <thread>

#include "tandem/collectives/communicator.h"
#include "test_util.h"

namespace tandem {
namespace {

using distribute::Communicator;

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

TEST(InProcessCommunicator, AllReduceOfRanksIsTheClosedForm) {
  for (int n : {1, 2, 3, 4}) {
    for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) {
      auto comm = distribute::make_in_process_communicator(n);
      std::vector<std::vector<float>> data(static_cast<size_t>(n));
      on_replicas(n, [&](int r) {
        auto& d = data[static_cast<size_t>(r)];
        d.assign(static_cast<size_t>(len), static_cast<float>(r));
        for (int64_t i = 0; i < len; ++i) d[static_cast<size_t>(i)] += static_cast<float>(i % 5);
        comm->all_reduce_sum(r, d.data(), len);
      });
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < len; ++i)
          ASSERT_EQ(data[static_cast<size_t>(r)][static_cast<size_t>(i)],
                    static_cast<float>(n * (n - 1) / 2 + n * (i % 5)))
              << "replicas " << n << " length " << len << " rank " << r << " index " << i;
    }
  }
}

// Several buffers reduced as one collective give what one all-reduce of their concatenation
// gives, bit for bit, whatever the slice boundaries (uneven sizes, empty buffers, 1–4 replicas);
// the packing default of the interface gives the same.
TEST(InProcessCommunicator, GroupedAllReduceEqualsTheConcatenatedOne) {
  struct Packing : Communicator {  // the interface's default over the in-process single-buffer collective
    explicit Packing(int n) : inner(distribute::make_in_process_communicator(n)) {}
    int size() const override { return inner->size(); }
    using Communicator::all_reduce_sum;
    void all_reduce_sum(int rank, float* data, int64_t n) override { inner->all_reduce_sum(rank, data, n); }
    void all_reduce_sum(int rank, double* data, int64_t n) override { inner->all_reduce_sum(rank, data, n); }
    void all_gather(int rank, const float* send, int64_t n, float* recv) override {
      inner->all_gather(rank, send, n, recv);
    }
    void all_gather(int rank, const double* send, int64_t n, double* recv) override {
      inner->all_gather(rank, send, n, recv);
    }
    void broadcast(int rank, float* data, int64_t n, int root) override { inner->broadcast(rank, data, n, root); }
    void barrier(int rank) override { inner->barrier(rank); }
    void abort(int rank, const std::string& reason) override { inner->abort(rank, reason); }
    std::unique_ptr<Communicator> inner;
  };
  const std::vector<size_t> sizes = {5, 0, 1, 1000, 3, 77};
  for (int n : {1, 2, 3, 4}) {
    for (bool packing : {false, true}) {
      std::unique_ptr<Communicator> grouped =
          packing ? std::make_unique<Packing>(n) : distribute::make_in_process_communicator(n);
      auto flat = distribute::make_in_process_communicator(n);
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
        grouped->all_reduce_sum(r, buffers);
        flat->all_reduce_sum(r, all.data(), static_cast<int64_t>(all.size()));
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
  auto comm = distribute::make_in_process_communicator(2);
  auto errors = on_replicas(2, [&](int r) {
    std::vector<float> a(4), b(r == 0 ? 6 : 2), c(r == 0 ? 0 : 4);
    std::vector<std::span<float>> buffers{a, b, c};
    comm->all_reduce_sum(r, buffers);
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("mismatched buffers"), std::string::npos) << e;
}

TEST(InProcessCommunicator, FloatSumsAreBitwiseIdenticalAcrossReplicas) {
  const int n = 3;
  const int64_t len = 4099;
  auto comm = distribute::make_in_process_communicator(n);
  std::vector<std::vector<float>> data(n);
  on_replicas(n, [&](int r) {
    Tensor t = testing::random_tensor({len}, 10 + static_cast<uint64_t>(r));
    data[static_cast<size_t>(r)] = t.to_vector();
    comm->all_reduce_sum(r, data[static_cast<size_t>(r)].data(), len);
  });
  EXPECT_EQ(data[0], data[1]);
  EXPECT_EQ(data[1], data[2]);
}

TEST(InProcessCommunicator, BroadcastAndBarrier) {
  auto comm = distribute::make_in_process_communicator(3);
  std::vector<std::vector<float>> data(3);
  on_replicas(3, [&](int r) {
    data[static_cast<size_t>(r)].assign(5, static_cast<float>(r + 1));
    comm->broadcast(r, data[static_cast<size_t>(r)].data(), 5, 2);
    comm->barrier(r);
  });
  for (auto& d : data) EXPECT_EQ(d, std::vector<float>(5, 3.0f));
}

TEST(InProcessCommunicator, MismatchedSizesNameBothSides) {
  auto comm = distribute::make_in_process_communicator(2, std::chrono::milliseconds(2000));
  auto errors = on_replicas(2, [&](int r) {
    std::vector<float> d(static_cast<size_t>(r == 0 ? 10 : 12));
    comm->all_reduce_sum(r, d.data(), static_cast<int64_t>(d.size()));
  });
  EXPECT_NE(errors[0].find("mismatched sizes: replica 0 passed 10 floats, but replica 1 passed 12"), std::string::npos)
      << errors[0];
}

TEST(InProcessCommunicator, AFailingReplicaStopsTheOthers) {
  auto comm = distribute::make_in_process_communicator(3);
  auto errors = on_replicas(3, [&](int r) {
    std::vector<float> d(100, 1.0f);
    if (r == 1) {
      comm->abort(r, "bad input in its shard");
      return;
    }
    comm->all_reduce_sum(r, d.data(), 100);
  });
  EXPECT_NE(errors[0].find("replica 1 failed: bad input in its shard"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("replica 1 failed: bad input in its shard"), std::string::npos) << errors[2];
}

TEST(InProcessCommunicator, AMissingReplicaTimesOut) {
  auto comm = distribute::make_in_process_communicator(2, std::chrono::milliseconds(200));
  std::vector<float> d(4, 1.0f);
  EXPECT_TRUE(testing::throws_error([&] { comm->all_reduce_sum(0, d.data(), 4); },
                                    {"timed out", "replica 0 waited 200 ms", "1 of 2 arrived"}));
  EXPECT_TRUE(testing::throws_error([&] { comm->barrier(5); }, {"rank 5 out of range [0, 2)"}));
}

}  // namespace
}  // namespace tandem
