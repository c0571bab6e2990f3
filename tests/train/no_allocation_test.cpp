// Steady-state training steps allocate nothing: this binary replaces the global operator new
// to count every C++ allocation, and reads the pool's count of blocks taken from the system.
// With one intra-op thread or two (Tandem's own pool hands chunks to its helpers; oneDNN runs
// single-threaded inside each), the whole step, oneDNN included, makes no C++ allocation.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "tandem/allocator.h"
#include "tandem/model.h"
#include "tandem/runtime.h"
#include "test_util.h"

namespace {
std::atomic<uint64_t> cpp_allocations{0};
}

void* operator new(size_t n) {
  cpp_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace tandem {
namespace {

// Records both counters between batch `from` and batch `to` of the first epoch.
class AllocationProbe : public Callback {
 public:
  AllocationProbe(int64_t from, int64_t to) : from_(from), to_(to) {}
  void on_batch_end(int64_t batch, const Logs&) override {
    if (batch == from_) {
      cpp_start_ = cpp_allocations.load();
      pool_start_ = memory::stats().system_allocations;
      pool_requests_start_ = memory::stats().pool_allocations;
    }
    if (batch == to_) {
      cpp = cpp_allocations.load() - cpp_start_;
      pool = memory::stats().system_allocations - pool_start_;
      pool_requests = memory::stats().pool_allocations - pool_requests_start_;
    }
  }
  uint64_t cpp = ~0ull, pool = ~0ull, pool_requests = 0;

 private:
  int64_t from_, to_;
  uint64_t cpp_start_ = 0, pool_start_ = 0, pool_requests_start_ = 0;
};

std::shared_ptr<AllocationProbe> train_reference_mlp(int threads) {
  using namespace layers;
  set_num_threads(threads);
  const int64_t n = 2000, features = 784;
  Tensor x = testing::random_tensor({n, features}, 1, 0.0f, 1.0f);
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));

  Sequential model;
  model.add(Dense(128, "relu", {.input_shape = Shape{features}}));
  model.add(Dropout(0.2f));
  model.add(Dense(10, "softmax"));
  model.compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  auto probe = std::make_shared<AllocationProbe>(10, 70);
  model.fit(x, y, {.epochs = 1, .batch_size = 25, .callbacks = {probe}, .verbose = 0});
  return probe;
}

TEST(NoAllocation, SteadyStateTrainingStepsAllocateNothing) {
  auto probe = train_reference_mlp(1);

  EXPECT_GT(probe->pool_requests, 60u * 10u) << "the probe did not see the training steps";
  EXPECT_EQ(probe->cpp, 0u) << "C++ heap allocations during 60 steady-state steps";
  EXPECT_EQ(probe->pool, 0u) << "pool blocks taken from the system during 60 steady-state steps";
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(NoAllocation, NothingWithTwoThreadsEither) {
  auto probe = train_reference_mlp(2);
  EXPECT_GT(probe->pool_requests, 60u * 10u);
  EXPECT_EQ(probe->cpp, 0u) << "C++ heap allocations during 60 steady-state steps";
  EXPECT_EQ(probe->pool, 0u) << "pool blocks taken from the system during 60 steady-state steps";
}

}  // namespace
}  // namespace tandem
