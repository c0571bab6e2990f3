// Tensor fusion, compression and the Horovod-style facade. Alone: 16-bit rounding against known
// values and the format's precision; a compressed all-reduce over in-process ranks; the facade as a
// group of one; the timeline's JSON. Under `tandem launch` (tests/distribute/mpi_check.cpp, skipped
// without MPI): fused and unfused all-reduces give the rank-order sum's bits on 2 and 3 ranks, fit
// gives the same bits fused and unfused, and the facade trains as MultiWorkerMirroredStrategy does.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "distribute/gradient_reducer.h"
#include "distribute/launch_util.h"
#include "tandem/distribute/strategy.h"
#include "tandem/hvd.h"
#include "tandem/model.h"
#include "tandem/timeline.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using distribute::Compression;

float rounded(float v, Compression wire) {
  distribute::round_to_wire(&v, 1, wire);
  return v;
}

TEST(Compression, RoundsToNearestEvenAsTheFormatsDo) {
  const float inf = std::numeric_limits<float>::infinity();
  for (Compression wire : {Compression::Float16, Compression::BFloat16}) {
    EXPECT_EQ(rounded(1.0f, wire), 1.0f);
    EXPECT_EQ(rounded(-0.0f, wire), -0.0f);
    EXPECT_TRUE(std::signbit(rounded(-0.0f, wire)));
    EXPECT_EQ(rounded(inf, wire), inf);
    EXPECT_EQ(rounded(-inf, wire), -inf);
    EXPECT_TRUE(std::isnan(rounded(std::numeric_limits<float>::quiet_NaN(), wire)));
  }
  // fp16: 11 significant bits; ties to even; 65504 the largest; 65520 and above overflow
  EXPECT_EQ(rounded(1.0f + std::ldexp(1.0f, -11), Compression::Float16), 1.0f);  // a tie: to even
  EXPECT_EQ(rounded(1.0f + 3 * std::ldexp(1.0f, -11), Compression::Float16), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(rounded(1.0f + std::ldexp(1.0f, -10), Compression::Float16), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(rounded(65504.0f, Compression::Float16), 65504.0f);
  EXPECT_EQ(rounded(65519.0f, Compression::Float16), 65504.0f);
  EXPECT_EQ(rounded(65520.0f, Compression::Float16), inf);
  EXPECT_EQ(rounded(-1e6f, Compression::Float16), -inf);
  // subnormal halves: multiples of 2^-24; half of the smallest rounds to 0 (even), 1.5 of it to 2
  EXPECT_EQ(rounded(std::ldexp(1.0f, -24), Compression::Float16), std::ldexp(1.0f, -24));
  EXPECT_EQ(rounded(std::ldexp(1.0f, -25), Compression::Float16), 0.0f);
  EXPECT_EQ(rounded(1.5f * std::ldexp(1.0f, -24), Compression::Float16), std::ldexp(2.0f, -24));
  EXPECT_EQ(rounded(std::ldexp(1023.0f, -24), Compression::Float16), std::ldexp(1023.0f, -24));
  EXPECT_EQ(rounded(std::ldexp(1023.75f, -24), Compression::Float16), std::ldexp(1.0f, -14));  // up into the normals
  // bf16: 8 significant bits and float32's range
  EXPECT_EQ(rounded(1.0f + std::ldexp(1.0f, -8), Compression::BFloat16), 1.0f);  // a tie: to even
  EXPECT_EQ(rounded(1.0f + 3 * std::ldexp(1.0f, -8), Compression::BFloat16), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(rounded(3e38f, Compression::BFloat16), std::bit_cast<float>(0x7f62u << 16));  // 0x7f61b1e6 rounds up
  EXPECT_EQ(rounded(std::numeric_limits<float>::max(), Compression::BFloat16), inf);
  // Everywhere in range: within half a unit in the last place, and a value of the format stays.
  uint64_t state = 1;
  for (int i = 0; i < 100000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    float v = std::ldexp(static_cast<float>(state >> 40) / 16777216.0f - 0.5f,
                         static_cast<int>(state % 30) - 15);  // within fp16's range
    for (auto [wire, bits] : {std::pair{Compression::Float16, 11}, std::pair{Compression::BFloat16, 8}}) {
      float r = rounded(v, wire);
      EXPECT_LE(std::fabs(r - v), std::ldexp(std::fabs(v), -bits) + std::ldexp(1.0f, -25)) << v;
      EXPECT_EQ(rounded(r, wire), r) << v;
    }
  }
  // the 16-bit codes round-trip
  std::vector<float> values{0.5f, -2.0f, 1e-3f, 300.0f};
  std::vector<uint16_t> codes(values.size());
  std::vector<float> back(values.size());
  distribute::to_wire(values.data(), 4, Compression::Float16, codes.data());
  EXPECT_EQ(codes[0], 0x3800);
  EXPECT_EQ(codes[1], 0xc000);
  distribute::from_wire(codes.data(), 4, Compression::Float16, back.data());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(back[i], rounded(values[i], Compression::Float16));
}

TEST(Compression, InProcessAllReduceSumsTheRoundedValues) {
  auto comms = distribute::make_in_process_communicators(3);
  std::vector<std::vector<float>> data(3);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 50; ++i) data[static_cast<size_t>(r)].push_back(0.1f * static_cast<float>(i * (r + 1)) + 1e-4f);
  auto all = data;
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      comms[static_cast<size_t>(r)]->all_reduce_compressed(data[static_cast<size_t>(r)].data(), 50,
                                                           distribute::ReduceOp::Sum, Compression::BFloat16);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 50; ++i) {
    float want = 0;
    for (int r = 0; r < 3; ++r)
      want += rounded(all[static_cast<size_t>(r)][static_cast<size_t>(i)], Compression::BFloat16);
    EXPECT_EQ(data[0][static_cast<size_t>(i)], rounded(want, Compression::BFloat16));
    EXPECT_EQ(data[2][static_cast<size_t>(i)], data[0][static_cast<size_t>(i)]);
  }
  EXPECT_THROW(comms[0]->all_reduce_compressed(data[0].data(), 1, distribute::ReduceOp::Max, Compression::Float16),
               Error);
}

TEST(Timeline, WritesChromeTraceJsonWithEveryThreadAndPhase) {
  TempDir dir;
  Timeline timeline(2, "rank 2 \"quoted\"");
  { Timeline::Span s(&timeline, "forward", "replica 0"); }
  std::thread([&] { Timeline::Span s(&timeline, "all_reduce", "communication", 4096); }).join();
  { Timeline::Span s(&timeline, "wait"); }
  { Timeline::Span s(nullptr, "nowhere"); }
  timeline.write(dir.file("t.json"));
  auto trace = nlohmann::json::parse(io::read_file(dir.file("t.json")));
  std::map<std::string, int> phases, threads;
  for (const auto& e : trace["traceEvents"]) {
    EXPECT_EQ(e["pid"], 2);
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["args"]["name"]] = e["tid"];
    if (e["ph"] == "X") {
      ++phases[e["name"]];
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(phases, (std::map<std::string, int>{{"all_reduce", 1}, {"forward", 1}, {"wait", 1}}));
  EXPECT_EQ(threads.size(), 2u);  // "wait" ran on replica 0's thread, named by its first span
  EXPECT_TRUE(threads.count("replica 0") && threads.count("communication"));
  EXPECT_EQ(trace["traceEvents"][0]["args"]["name"], "rank 2 \"quoted\"");
  auto totals = timeline.totals();
  EXPECT_EQ(totals["forward"].count, 1);
  double hidden = hidden_fraction(totals);
  EXPECT_GE(hidden, 0.0);
  EXPECT_LE(hidden, 1.0);
  EXPECT_EQ(hidden_fraction({{"all_reduce", {2.0, 1}}, {"wait", {0.5, 1}}}), 0.75);
  EXPECT_EQ(hidden_fraction({{"all_reduce", {1.0, 1}}, {"wait", {3.0, 1}}}), 0.0);
  EXPECT_THROW(timeline.write(dir.file("missing/dir/t.json")), Error);
}

// hvd alone (no launcher): a group of one, whose DistributedOptimizer is the optimizer itself.
TEST(Hvd, AloneIsAGroupOfOne) {
  hvd::init();
  EXPECT_EQ(hvd::size(), 1);
  EXPECT_EQ(hvd::rank(), 0);
  EXPECT_EQ(hvd::local_size(), 1);
  EXPECT_EQ(&hvd::init(), &hvd::context());
  Tensor t = Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3, 4});
  EXPECT_EQ(hvd::allreduce(t).to_vector(), t.to_vector());
  EXPECT_EQ(hvd::allgather(t).shape(), (Shape{2, 2}));
  EXPECT_EQ(hvd::broadcast(t, 0).to_vector(), t.to_vector());
  EXPECT_THROW(hvd::allgather(Tensor::full({}, 1.0f)), Error);

  auto train = [](bool distributed, int passes) {
    Tensor x = random_tensor({32, 5}, 1), y = random_tensor({32, 2}, 2);
    Sequential model(SequentialOptions{.seed = 4});
    model.add(layers::Dense(8, "relu", {.input_shape = Shape{5}}));
    model.add(layers::Dense(2));
    std::unique_ptr<Optimizer> opt = std::make_unique<optimizers::SGD>(0.05f, optimizers::SGDOptions{.momentum = 0.5f});
    if (distributed)
      opt = hvd::DistributedOptimizer(std::move(opt),
                                      {.backward_passes_per_step = passes, .average_aggregated_gradients = true});
    model.compile(std::move(opt), Loss::mean_squared_error());
    FitOptions options{.epochs = 2, .batch_size = 8 / passes, .shuffle = false, .verbose = 0};
    options.callbacks = {std::make_shared<hvd::BroadcastGlobalVariables>(0), std::make_shared<hvd::MetricAverage>(),
                         std::make_shared<hvd::LearningRateWarmup>(0.05f, 1.0, 4 * passes)};
    model.fit(x, y, options);
    std::vector<float> w;
    for (Variable* v : model.variables())
      for (float f : v->value.to_vector()) w.push_back(f);
    return std::pair{w, model.optimizer().iterations()};
  };
  auto [plain, plain_steps] = train(false, 1);
  auto [one, one_steps] = train(true, 1);
  EXPECT_EQ(one, plain);  // the mean over one process is the gradient itself
  EXPECT_EQ(one_steps, plain_steps);
  // Two passes of 4 rows averaged: one update per 8 rows, as a batch of 8 (within rounding).
  auto [two, two_steps] = train(true, 2);
  EXPECT_EQ(two_steps, plain_steps);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(two[i], plain[i], 1e-5 + 1e-5 * std::fabs(plain[i]));

  auto sgd = std::make_unique<optimizers::SGD>(0.1f);
  auto wrapped = hvd::DistributedOptimizer(std::move(sgd));
  EXPECT_THROW(hvd::DistributedOptimizer(std::move(wrapped)), Error);
  EXPECT_THROW(hvd::DistributedOptimizer(std::make_unique<optimizers::SGD>(0.1f), {.backward_passes_per_step = 0}),
               Error);
  EXPECT_THROW(hvd::LearningRateWarmup(0.1f, 0.0, 10), Error);
}

// Warmup from initial ÷ size to initial over the warmup epochs (Horovod's formula), measured on a
// context of 4 in-process ranks through the optimizer's learning rate at each batch.
TEST(Hvd, LearningRateWarmupRisesFromAFractionToTheRate) {
  auto comms = distribute::make_in_process_communicators(4);
  hvd::Context four(std::shared_ptr<distribute::Communicator>(std::move(comms[0])));
  Sequential model(SequentialOptions{.seed = 1});
  model.add(layers::Dense(1, "linear", {.input_shape = Shape{1}}));
  model.compile(optimizers::SGD(0.4f), Loss::mean_squared_error());
  hvd::LearningRateWarmup warmup(0.4f, 2.0, 10, &four);
  warmup.model = &model;
  warmup.on_epoch_begin(0, {});
  warmup.on_batch_begin(0, {});
  EXPECT_FLOAT_EQ(model.optimizer().current_learning_rate(), 0.1f);
  warmup.on_batch_begin(5, {});  // a quarter through: 0.1 × (0.25 × 3 + 1)
  EXPECT_FLOAT_EQ(model.optimizer().current_learning_rate(), 0.175f);
  warmup.on_epoch_begin(2, {});
  warmup.on_batch_begin(0, {});
  EXPECT_FLOAT_EQ(model.optimizer().current_learning_rate(), 0.4f);
  model.optimizer().set_learning_rate(0.3f);  // after the warmup, the rate is the caller's
  warmup.on_batch_begin(1, {});
  EXPECT_FLOAT_EQ(model.optimizer().current_learning_rate(), 0.3f);
}

TEST(Hvd, DistributedOptimizerRefusesReplicasOfAStrategy) {
  distribute::MirroredStrategy mirrored({.num_replicas = 2, .threads_per_replica = 1});
  std::unique_ptr<Model> model;
  {
    distribute::Strategy::Scope scope(&mirrored);
    model = std::make_unique<Sequential>();
    model->add(layers::Dense(2, "linear", {.input_shape = Shape{3}}));
  }
  hvd::Context alone(
      std::shared_ptr<distribute::Communicator>(std::move(distribute::make_in_process_communicators(1)[0])));
  model->compile(hvd::DistributedOptimizer(std::make_unique<optimizers::SGD>(0.1f), {.context = &alone}),
                 Loss::mean_squared_error());
  try {
    model->fit(random_tensor({8, 3}, 1), random_tensor({8, 2}, 2), {.epochs = 1, .batch_size = 4, .verbose = 0});
    ADD_FAILURE() << "fit ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use MultiWorkerMirroredStrategy instead"), std::string::npos) << e.what();
  }
}

// The fusion engine after backward (Horovod's path, and a step whose replicas run several parts):
// each replica's parts summed in order, then buckets of any size all-reduced in rank order: the
// bits of the grouped policy's single all-reduce, and of the sum written out by hand.
TEST(Fusion, BucketsAfterBackwardSumPartsAndRanksAsOneAllReduceDoes) {
  const int replicas = 3, parts = 2;
  std::vector<Shape> shapes{{5, 4}, {4}, {3, 7}, {1}};
  auto gradient = [&](int r, int p, size_t i) {
    return random_tensor(shapes[i], 100 * static_cast<uint64_t>(r) + 10 * static_cast<uint64_t>(p) + i, -3, 3);
  };
  auto reduce = [&](distribute::GradientReduction policy) {
    auto comms = distribute::make_in_process_communicators(replicas);
    distribute::BatchSplit split;
    split.even(replicas * parts * 4, replicas * parts, replicas);
    std::vector<std::vector<std::vector<float>>> out(replicas);
    std::vector<std::thread> threads;
    for (int r = 0; r < replicas; ++r)
      threads.emplace_back([&, r] {
        std::vector<Tensor> sources;
        for (const Shape& s : shapes) sources.push_back(Tensor::zeros(s));
        distribute::GradientReducer reducer(policy, sources);
        reducer.begin(comms[static_cast<size_t>(r)].get(), split, r);
        for (int p = 0; p < parts; ++p) {
          std::vector<Tensor> grads;
          for (size_t i = 0; i < shapes.size(); ++i) grads.push_back(gradient(r, p, i));
          reducer.add(p, grads);
        }
        for (const Tensor& t : reducer.finish()) out[static_cast<size_t>(r)].push_back(t.to_vector());
      });
    for (auto& t : threads) t.join();
    for (int r = 1; r < replicas; ++r) EXPECT_EQ(out[static_cast<size_t>(r)], out[0]);
    return out[0];
  };
  auto grouped = reduce({});
  for (int64_t bytes : {0, 16, 100, 1 << 20}) {
    auto bucketed = reduce({.kind = distribute::GradientReduction::Kind::Bucketed, .bucket_bytes = bytes});
    EXPECT_EQ(bucketed, grouped) << bytes << " bytes";
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::vector<float> want(static_cast<size_t>(shapes[i].numel()));
    for (size_t k = 0; k < want.size(); ++k) {
      float sum = 0;
      for (int r = 0; r < replicas; ++r) {
        float own = gradient(r, 0, i).to_vector()[k] + gradient(r, 1, i).to_vector()[k];
        sum = r == 0 ? own : sum + own;
      }
      want[k] = sum;
    }
    EXPECT_EQ(grouped[i], want) << i;
  }
}

TEST(Fusion, AllReducesKeepTheRankOrderSumFusedOrNot) {
  SKIP_WITHOUT_MPI();
  expect_scenario({2, 3}, "fusion", "fusion keeps bits");
}

TEST(Fusion, FitGivesTheSameBitsFusedAndUnfused) {
  SKIP_WITHOUT_MPI();
  expect_scenario({3}, "train", "fused bits match", {"1", "fused-bits"});
}

TEST(Hvd, TrainsAsMultiWorkerMirroredStrategyOnTheSameGlobalBatches) {
  SKIP_WITHOUT_MPI();
  expect_scenario({2, 3}, "hvd", "hvd matches the strategy");
}

// The tutorial's Horovod recipe (examples/hvd_mnist.cpp) on 2 processes: it trains, rank 0
// reports once, and only rank 0 writes checkpoints (the processes would otherwise overwrite
// each other's).
TEST(Hvd, TheRecipeExampleTrainsOnTwoProcesses) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 100);
  std::filesystem::create_directories(dir.file("ck"));
  Watched w = run_watched(
      {TANDEM_CLI, "launch", "-np", "2", "--", TANDEM_HVD_EXAMPLE, "2", dir.file("data"), dir.file("ck")}, dir, 120);
  ASSERT_EQ(w.code, 0) << w.output;
  EXPECT_NE(w.output.find("2 processes: test accuracy"), std::string::npos) << w.output;
  EXPECT_EQ(w.output.find("test accuracy"), w.output.rfind("test accuracy")) << w.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("ck/ckpt-2.safetensors")));
}

// tandem compare --predict: the ring's cost for the model's gradient bytes at each worker count
// and link (mlp: 101,770 parameters, 407,080 bytes; 8 workers on 10 Gbit/s with 50 us per hop:
// 2 · 7/8 · 407,080 · 8 / 1e10 s + 14 · 50 us = 1.270 ms), and mistakes named.
TEST(Predict, PrintsTheRingsCostPerWorkerCountAndLink) {
  TempDir dir;
  Watched w = run_watched({TANDEM_CLI, "compare", "--model", "mlp", "--batch-size", "32", "--threads", "1", "--steps",
                           "3", "--predict", "1,8", "--bandwidth", "10gbit,100mbit", "--overlap", "0.5"},
                          dir, 120);
  ASSERT_EQ(w.code, 0) << w.output;
  EXPECT_NE(w.output.find("mlp: 407080 gradient bytes per step"), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("50% of the all-reduce hidden"), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("       8        10G"), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("          1.270"), std::string::npos) << w.output;  // 8 workers at 10 Gbit/s: all-reduce ms
  EXPECT_NE(w.output.find("100.0%"), std::string::npos) << w.output;           // one worker: no all-reduce
  for (auto [flag, value, message] :
       {std::tuple{"--bandwidth", "fast", "--bandwidth \"fast\": expected a rate such as 10gbit"},
        std::tuple{"--predict", "0", "--predict \"0\": expected worker counts such as 8,64,512"},
        std::tuple{"--timeline", "missing.json", "missing.json"}}) {
    std::vector<std::string> argv{TANDEM_CLI, "compare", "--model", "mlp", flag, value};
    if (std::string(flag) != "--predict") argv.insert(argv.end(), {"--predict", "8"});
    Watched bad = run_watched(argv, dir, 60);
    EXPECT_NE(bad.code, 0) << flag;
    EXPECT_NE(bad.output.find(message), std::string::npos) << bad.output;
  }
}

}  // namespace
}  // namespace tandem::testing
