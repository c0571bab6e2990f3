// Training beside a competing busy process, with the default threads: the CPU time it burns
// (getrusage, never wall time) stays within 2× of its CPU time alone, for the default strategy
// and for MirroredStrategy. Spinning waits on a taken core would burn ~100× (measured before
// Tandem had its own pool: libgomp's barriers turned each op into a lost time slice). A binary of
// its own, run alone (RUN_SERIAL): a watchdog alarm ends it, and the busy child dies with it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "tandem/distribute/strategy.h"
#include "tandem/distribute/strategy_registry.h"
#include "tandem/model.h"
#include "tandem/runtime.h"
#include "test_util.h"

namespace tandem {
namespace {

using namespace layers;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// A child process that keeps one core busy until it is killed, or its parent dies, or 5 minutes pass.
class BusyProcess {
 public:
  BusyProcess() {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(300);
      for (uint64_t i = 0;; ++i) asm volatile("" : : "r"(i));  // kept: the compiler may not drop the loop
    }
    usleep(100 * 1000);  // let it reach the run queue
  }
  ~BusyProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_;
};

// The CPU seconds of fitting the first tutorial's MLP (small ops: where a collapse is worst) for
// `steps` steps of `batch` rows, after a warm-up.
double fit_cpu_seconds(const std::string& strategy_name, int64_t batch, int64_t steps) {
  const int64_t rows = batch * steps;
  Tensor x = testing::random_tensor({rows, 784}, 1);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  Tensor y = Tensor::from_vector({rows}, std::span<const int32_t>(labels));
  std::unique_ptr<distribute::Strategy> strategy = distribute::make_strategy(strategy_name, 0);
  std::unique_ptr<Model> model;
  {
    std::optional<distribute::Strategy::Scope> scope;
    if (strategy) scope.emplace(strategy.get());
    model = std::make_unique<Sequential>();
    model->add(Dense(128, "relu", {.input_shape = Shape{784}}));
    model->add(Dropout(0.2f));
    model->add(Dense(10, "softmax"));
    model->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  }
  model->fit(x.slice(0, batch * 4), y.slice(0, batch * 4), {.epochs = 1, .batch_size = batch, .verbose = 0});
  double before = cpu_seconds();
  model->fit(x, y, {.epochs = 1, .batch_size = batch, .verbose = 0});
  return cpu_seconds() - before;
}

void expect_graceful_under_load(const std::string& strategy, int64_t batch) {
  if (usable_cores() < 2) GTEST_SKIP() << "one usable core: no intra-op parallelism to collapse";
  const int64_t steps = 80000 / batch;
  double alone = fit_cpu_seconds(strategy, batch, steps);
  BusyProcess busy;
  ASSERT_TRUE(busy.started()) << "fork failed";
  double loaded = fit_cpu_seconds(strategy, batch, steps);
  std::printf("%s: %.3f CPU s alone, %.3f CPU s beside a busy process (%.2fx); %d usable cores, %d free now\n",
              strategy.c_str(), alone, loaded, loaded / alone, usable_cores(), free_cores());
  EXPECT_LE(loaded, 2.0 * alone) << strategy << " burns CPU waiting on a taken core";
}

TEST(ThreadsUnderLoad, DefaultStrategyBurnsAtMostTwiceItsCpuTimeBesideABusyProcess) {
  expect_graceful_under_load("default", 25);
}

TEST(ThreadsUnderLoad, MirroredStrategyBurnsAtMostTwiceItsCpuTimeBesideABusyProcess) {
  expect_graceful_under_load("mirrored:2", 50);
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  alarm(240);  // the watchdog: SIGALRM ends the test; the busy child follows by PR_SET_PDEATHSIG
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
