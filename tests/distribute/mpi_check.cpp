// Run by tests/distribute/mpi_test.cpp under `tandem launch` (one process per rank): each scenario
// exercises the MPI communicator and prints what the test asserts on.
//   tandem_mpi_check SCENARIO TIMEOUT_MS
// collectives: every collective of the interface against values computed here ("rank R: ok").
// mismatch: rank 1 passes one value fewer to an all-reduce. p2p-mismatch: a receive expecting
// another count. stuck: the last rank hangs before a collective, its beats going on. die: rank 1
// kills itself (SIGKILL) after the first collective; stop: rank 1 stops itself (SIGSTOP) there.
// train LOCAL MODE: MultiWorkerMirroredStrategy (LOCAL replicas per worker) trains a dropout
// MLP and a synchronized batch-normalization CNN for two epochs; each rank compares its weights
// with the same model trained in this process alone on the same global batches (MODE "fast", or
// "bucketed" with gradients all-reduced in 256-byte buckets on the MPI thread during backward:
// the default strategy, within 1e-6 + 1e-5 × |value|; "deterministic": MirroredStrategy with one replica in
// deterministic mode, bit for bit) and prints "rank R: weights match". custom LOCAL: a custom
// training loop (distribute_dataset, run, reduce) against one process's ("rank R: custom loop matches").
// uneven ROWS: rank 1 trains on ROWS rows, rank 0 on 73 (an error naming the workers and what differs).
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tandem/collectives/mpi.h"
#include "tandem/distribute/multi_worker.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/tandem.h"
#include "test_util.h"

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

using Make = std::function<std::unique_ptr<Sequential>()>;

std::unique_ptr<Sequential> dropout_mlp() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(layers::Dense(16, "relu", {.input_shape = Shape{6}}));
  m->add(layers::Dropout(0.3f));
  m->add(layers::Dense(4, "softmax"));
  m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}

std::unique_ptr<Sequential> batch_norm_cnn() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(layers::Conv2D(4, 3, {.padding = "same", .input_shape = Shape{6, 6, 1}}));
  m->add(layers::BatchNormalization({.momentum = 0.9f, .synchronized = true}));
  m->add(layers::Activation("relu"));
  m->add(layers::Flatten());
  m->add(layers::Dense(4));
  m->compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  return m;
}

// n = 73: global batches of 24, the last one of 1 row (most replicas' shares empty).
std::vector<std::vector<float>> train(const Make& make, distribute::Strategy* strategy, Shape per_sample,
                                      int64_t n = 73) {
  Shape shape{n};
  for (int64_t d : per_sample) shape.push_back(d);
  Tensor x = tandem::testing::random_tensor(shape, 5);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));
  std::unique_ptr<Sequential> model;
  {
    std::optional<distribute::Strategy::Scope> scope;
    if (strategy != nullptr) scope.emplace(strategy);
    model = make();
  }
  model->fit(x, y, {.epochs = 2, .batch_size = 24, .verbose = 0});
  std::vector<std::vector<float>> out;
  for (Variable* v : model->variables()) out.push_back(v->value.to_vector());
  return out;
}

void train_and_compare(std::shared_ptr<Communicator> world, int local, const std::string& mode) {
  bool deterministic = mode == "deterministic";
  distribute::MultiWorkerMirroredStrategy strategy({.local_replicas = local,
                                                    .threads_per_replica = 1,
                                                    .deterministic = deterministic,
                                                    .bucket_bytes = mode == "bucketed" ? 256 : 0,
                                                    .workers = world});
  distribute::MirroredStrategy one({.num_replicas = 1, .threads_per_replica = 1, .deterministic = true});
  for (auto [name, make, per_sample] : {std::tuple{"dropout mlp", Make(dropout_mlp), Shape{6}},
                                        std::tuple{"batch norm cnn", Make(batch_norm_cnn), Shape{6, 6, 1}}}) {
    auto got = train(make, &strategy, per_sample);
    auto want = train(make, deterministic ? &one : nullptr, per_sample);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      for (size_t j = 0; j < got[i].size(); ++j) {
        double a = got[i][j], b = want[i][j];
        worst = std::max(worst, std::fabs(a - b) / (1e-6 + 1e-5 * std::fabs(b)));  // ≤ 1: within tolerance
        if (deterministic) expect(a == b, fmt::format("{}: variable {} value {}: {} != {}", name, i, j, a, b));
      }
    expect(worst <= 1.0, fmt::format("{}: a weight differs by {} × (1e-6 + 1e-5 × |value|)", name, worst));
    std::printf("rank %d: %s: largest difference %g × (1e-6 + 1e-5 × |value|)\n", world->rank(), name, worst);
  }
  std::printf("rank %d: %s\n", world->rank(), failures == 0 ? "weights match" : "weights DIFFER");
}

// A custom training loop (distribute_dataset, run, reduce) under MultiWorkerMirroredStrategy:
// the summed losses and the weights equal one process's loop over the same global batches.
std::pair<std::vector<double>, std::vector<float>> custom_loop(distribute::Strategy* strategy) {
  int64_t n = 96, global_batch = 24;
  Tensor x = tandem::testing::random_tensor({n, 6}, 5);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));
  std::optional<distribute::Strategy::Scope> scope;
  if (strategy != nullptr) scope.emplace(strategy);
  Sequential model(SequentialOptions{.seed = 3});
  model.add(layers::Dense(16, "relu", {.input_shape = Shape{6}}));
  model.add(layers::Dense(4));
  optimizers::SGD optimizer(0.1f);
  Loss loss_fn = Loss::sparse_categorical_crossentropy(true);
  auto step = [&](const data::Element& batch) {
    GradientTape tape;
    Tensor loss = compute_average_loss(loss_fn.per_sample(batch[1], model(batch[0], true)), global_batch);
    std::vector<Variable*> variables = model.trainable_variables();
    optimizer.apply(variables, tape.gradient(loss, variables));
    return loss;
  };
  auto dataset = data::Dataset::from_tensor_slices({x, y}).batch(global_batch);
  std::vector<double> losses;
  if (strategy != nullptr) {
    auto batches = strategy->distribute_dataset(dataset).iterate(0);
    while (auto batch = batches.next())
      losses.push_back(strategy->reduce(distribute::ReduceOp::Sum, strategy->run(step, *batch)).item());
  } else {
    auto batches = dataset.iterate(0);
    while (auto batch = batches->next()) losses.push_back(step(*batch).item());
  }
  std::vector<float> weights;
  for (Variable* v : model.trainable_variables())
    for (float w : v->value.to_vector()) weights.push_back(w);
  return {losses, weights};
}

void custom_loop_matches(std::shared_ptr<Communicator> world, int local) {
  distribute::MultiWorkerMirroredStrategy strategy(
      {.local_replicas = local, .threads_per_replica = 1, .workers = world});
  auto [losses, weights] = custom_loop(&strategy);
  auto [want_losses, want_weights] = custom_loop(nullptr);
  expect(losses.size() == want_losses.size(), "custom loop: step count");
  for (size_t i = 0; i < losses.size() && i < want_losses.size(); ++i)
    expect(std::fabs(losses[i] - want_losses[i]) <= 1e-5 * std::fabs(want_losses[i]) + 1e-6,
           fmt::format("custom loop: loss of step {}: {} != {}", i, losses[i], want_losses[i]));
  for (size_t i = 0; i < weights.size(); ++i)
    expect(std::fabs(weights[i] - want_weights[i]) <= 1e-5 * std::fabs(want_weights[i]) + 1e-6,
           fmt::format("custom loop: weight {}: {} != {}", i, weights[i], want_weights[i]));
  std::printf("rank %d: custom loop %s\n", world->rank(), failures == 0 ? "matches" : "DIFFERS");
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
      distribute::MultiWorkerMirroredStrategy strategy({.threads_per_replica = 1, .workers = comm});
      train(dropout_mlp, &strategy, Shape{6}, r == 1 ? std::atoi(argv[3]) : 73);
    } else if (scenario == "custom" && argc >= 4) {
      custom_loop_matches(comm, std::atoi(argv[3]));
    } else if (scenario == "train" && argc >= 5) {
      train_and_compare(comm, std::atoi(argv[3]), argv[4]);
    } else if (scenario == "collectives") {
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
