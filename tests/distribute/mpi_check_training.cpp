// tandem_mpi_check's training scenarios (mpi_check.h; what each checks is said at the top of
// mpi_check.cpp): MultiWorkerMirroredStrategy, a custom loop and the hvd facade, each against one
// process trained on the same global batches.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "distribute/mpi_check.h"
#include "tandem/distribute/multi_worker.h"
#include "tandem/hvd.h"
#include "tandem/model.h"
#include "tandem/tandem.h"
#include "test_util.h"

namespace tandem::mpi_check {

using namespace tandem::distribute;

namespace {

using Make = std::function<std::unique_ptr<Model>()>;

std::unique_ptr<Model> dropout_mlp() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(layers::Dense(16, "relu", {.input_shape = Shape{6}}));
  m->add(layers::Dropout(0.3f));
  m->add(layers::Dense(4, "softmax"));
  m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}

std::unique_ptr<Model> batch_norm_cnn() {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = 3});
  m->add(layers::Conv2D(4, 3, {.padding = "same", .input_shape = Shape{6, 6, 1}}));
  m->add(layers::BatchNormalization({.momentum = 0.9f, .synchronized = true}));
  m->add(layers::Activation("relu"));
  m->add(layers::Flatten());
  m->add(layers::Dense(4));
  m->compile(optimizers::SGD(0.05f, {.momentum = 0.9f}), Loss::sparse_categorical_crossentropy(true), {"accuracy"});
  return m;
}

// Keras' regularizers on the first layer (kernel and activity) and the last (kernel), and sample
// weights by row: what the "weighted" mode and ZeRO's comparison train with.
void regularize(Model& model) {
  model.layers().front()->set_regularizers({.kernel = {.l2 = 0.01f}, .activity = {.l1 = 0.001f}});
  model.layers().back()->set_regularizers({.kernel = {.l1 = 0.002f, .l2 = 0.003f}});
}
Tensor row_weights(int64_t n) {
  std::vector<float> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i)] = 0.25f + static_cast<float>(i % 5) * 0.5f;
  return Tensor::from_vector({n}, std::span<const float>(w));
}

// n = 73: global batches of 24, the last one of 1 row (most replicas' shares empty).
std::vector<std::vector<float>> train(const Make& make, distribute::Strategy* strategy, Shape per_sample,
                                      int64_t n = 73, bool freeze_first_two = false, bool weighted = false) {
  Shape shape{n};
  for (int64_t d : per_sample) shape.push_back(d);
  Tensor x = tandem::testing::random_tensor(shape, 5);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  Tensor y = Tensor::from_vector({n}, std::span<const int32_t>(labels));
  std::unique_ptr<Model> model;
  {
    std::optional<distribute::Strategy::Scope> scope;
    if (strategy != nullptr) scope.emplace(strategy);
    model = make();
  }
  if (freeze_first_two)  // fine-tuning: the base frozen (a frozen batch normalization runs in inference mode)
    for (int i = 0; i < 2; ++i) model->layers()[static_cast<size_t>(i)]->set_trainable(false);
  if (weighted) regularize(*model);
  model->fit(x, y,
             {.epochs = 2, .batch_size = 24, .verbose = 0, .sample_weight = weighted ? row_weights(n) : Tensor()});
  std::vector<std::vector<float>> out;
  for (Variable* v : model->variables()) out.push_back(v->value.to_vector());
  return out;
}

// Fused (256-byte buckets during backward, with a cycle time) against one all-reduce after
// backward, on the same workers: the same bits.
void fused_bits(std::shared_ptr<Communicator> world) {
  distribute::MultiWorkerMirroredStrategy fused(
      {.threads_per_replica = 1, .bucket_bytes = 256, .cycle_time = std::chrono::microseconds(20), .workers = world});
  distribute::MultiWorkerMirroredStrategy grouped({.threads_per_replica = 1, .workers = world});
  for (auto [name, make, per_sample] : {std::tuple{"dropout mlp", Make(dropout_mlp), Shape{6}},
                                        std::tuple{"batch norm cnn", Make(batch_norm_cnn), Shape{6, 6, 1}}}) {
    auto got = train(make, &fused, per_sample), want = train(make, &grouped, per_sample);
    for (size_t i = 0; i < got.size(); ++i)
      expect(got[i] == want[i], fmt::format("{}: variable {} differs fused and unfused", name, i));
  }
  std::printf("rank %d: %s\n", world->rank(), failures == 0 ? "fused bits match" : "fused bits DIFFER");
}

// ZeRO stage 1 against the plain strategy on the same workers, the ZeRO run resumed from its
// checkpoint on the way: the same weights (bitwise with deterministic), the same whole checkpoint
// state (Sequential::state, collective here), and each worker's slots 1/N of the whole (their sum
// over the workers the whole, exactly).
void zero_against_plain(std::shared_ptr<Communicator> world, bool deterministic) {
  // 2 epochs, then 1 more: on the same model, or (`resume`) on a new one loaded from a checkpoint
  // of the first (every worker writes its own copy: the state is gathered by all).
  auto state_of = [&](distribute::Strategy& strategy, int64_t rows, bool resume) {
    Shape shape{rows, 6};
    Tensor x = tandem::testing::random_tensor(shape, 5);
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
    Tensor y = Tensor::from_vector({rows}, std::span<const int32_t>(labels));
    auto make = [&] {
      Strategy::Scope scope(&strategy);
      std::unique_ptr<Model> m = dropout_mlp();  // Adam: two slots per variable
      regularize(*m);                            // the penalties' gradients added to each worker's shards
      return m;
    };
    std::unique_ptr<Model> model = make();
    model->fit(x, y, {.epochs = 2, .batch_size = 24, .verbose = 0, .sample_weight = row_weights(rows)});
    if (resume) {
      std::string path = (std::filesystem::temp_directory_path() /
                          fmt::format("tandem-zero-{}-{}.safetensors", getppid(), world->rank()))
                             .string();
      model->save_checkpoint(path);
      model = make();
      model->load_checkpoint(path);
      std::filesystem::remove(path);
    }
    model->fit(x, y, {.epochs = 1, .batch_size = 24, .verbose = 0, .sample_weight = row_weights(rows)});
    return model->state();
  };
  distribute::MultiWorkerMirroredStrategy plain(
      {.threads_per_replica = 1, .deterministic = deterministic, .workers = world});
  distribute::MultiWorkerMirroredStrategy zero({.threads_per_replica = 1,
                                                .deterministic = deterministic,
                                                .zero = true,
                                                .zero_bucket_bytes = 256,
                                                .workers = world});
  auto want = state_of(plain, 73, false), got = state_of(zero, 73, true);
  expect(got.size() == want.size(), fmt::format("zero's state has {} entries, plain's {}", got.size(), want.size()));
  int64_t whole_slots = 0;
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    expect(got[i].first == want[i].first, fmt::format("entry {}: {} against {}", i, got[i].first, want[i].first));
    std::vector<float> a = got[i].second.astype(DType::Float32).to_vector(),
                       b = want[i].second.astype(DType::Float32).to_vector();
    expect(a.size() == b.size(), fmt::format("{}: {} values against {}", got[i].first, a.size(), b.size()));
    if (want[i].first.starts_with("optimizer/") && want[i].first != "optimizer/iterations")
      whole_slots += static_cast<int64_t>(b.size()) * 4;
    for (size_t j = 0; j < std::min(a.size(), b.size()); ++j) {
      worst = std::max(worst, std::fabs(double{a[j]} - b[j]) / (1e-6 + 1e-5 * std::fabs(double{b[j]})));
      if (deterministic) expect(a[j] == b[j], fmt::format("{} value {}: {} != {}", got[i].first, j, a[j], b[j]));
    }
  }
  expect(worst <= 1.0, fmt::format("zero: a value differs by {} × (1e-6 + 1e-5 × |value|)", worst));
  int64_t mine = zero.extended().optimizer_slot_bytes(), sum = mine;
  world->all_reduce(&sum, 1, DataType::Int64, ReduceOp::Sum);
  int n = world->size();
  expect(sum == whole_slots, fmt::format("the workers' slots add up to {} bytes, the whole is {}", sum, whole_slots));
  expect(std::abs(mine * n - whole_slots) <= int64_t{8} * n * static_cast<int64_t>(want.size()),
         fmt::format("this worker keeps {} bytes of slots, 1/{} of {} is {}", mine, n, whole_slots, whole_slots / n));
  std::printf("rank %d: slots %lld of %lld bytes; largest difference %g\n", world->rank(), static_cast<long long>(mine),
              static_cast<long long>(whole_slots), worst);
  std::printf("rank %d: %s\n", world->rank(), failures == 0 ? "zero matches" : "zero DIFFERS");
}

}  // namespace

void train_and_compare(std::shared_ptr<Communicator> world, int local, const std::string& mode) {
  if (mode == "fused-bits") return fused_bits(world);
  if (mode == "zero" || mode == "zero-deterministic") return zero_against_plain(world, mode == "zero-deterministic");
  bool frozen = mode == "frozen", weighted = mode == "weighted",
       deterministic = mode == "deterministic" || frozen || weighted;
  distribute::MultiWorkerMirroredStrategy strategy({.local_replicas = local,
                                                    .threads_per_replica = 1,
                                                    .deterministic = deterministic,
                                                    .bucket_bytes = mode == "bucketed" ? 256 : 0,
                                                    .workers = world});
  distribute::MirroredStrategy one({.num_replicas = 1, .threads_per_replica = 1, .deterministic = true});
  for (auto [name, make, per_sample] : {std::tuple{"dropout mlp", Make(dropout_mlp), Shape{6}},
                                        std::tuple{"batch norm cnn", Make(batch_norm_cnn), Shape{6, 6, 1}}}) {
    auto got = train(make, &strategy, per_sample, 73, frozen, weighted);
    auto want = train(make, deterministic ? &one : nullptr, per_sample, 73, frozen, weighted);
    if (frozen) {  // the base's variables as made, bit for bit; the head's trained
      std::unique_ptr<Model> fresh = make();
      size_t base = fresh->layers()[0]->variables().size() + fresh->layers()[1]->variables().size();
      auto made = fresh->variables();
      for (size_t i = 0; i < made.size(); ++i) {
        bool same = made[i]->value.to_vector() == got[i];
        expect(i < base ? same : !same,
               fmt::format("{}: variable {} ({}) {}", name, i, made[i]->name,
                           i < base ? "of the frozen base changed" : "of the head did not train"));
      }
    }
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

namespace {

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

}  // namespace

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

namespace {

// The facade's tensors: allreduce, allgather with first dimensions that differ, broadcast.
void hvd_tensors(const hvd::Context& ctx) {
  int r = ctx.rank(), n = ctx.size();
  Tensor mean = ctx.allreduce(Tensor::full({2, 3}, static_cast<float>(r)));
  expect(mean.shape() == Shape{2, 3} && mean.to_vector()[5] == static_cast<float>(n - 1) / 2.0f, "hvd::allreduce mean");
  Tensor sum = ctx.allreduce(Tensor::full({4}, 1.5f), ReduceOp::Sum, Compression::BFloat16);
  expect(sum.to_vector()[3] == 1.5f * static_cast<float>(n), "hvd::allreduce sum, bf16");
  Tensor rows = ctx.allgather(Tensor::full({r + 1, 2}, static_cast<float>(r)));
  expect(rows.shape() == Shape{n * (n + 1) / 2, 2}, "hvd::allgather shape " + rows.shape().str());
  std::vector<float> got = rows.to_vector();
  expect(got.back() == static_cast<float>(n - 1) && got[0] == 0.0f && (n < 2 || got[3] == 1.0f),
         "hvd::allgather values");
  Tensor root = ctx.broadcast(Tensor::full({3}, static_cast<float>(r)), n - 1);
  expect(root.to_vector()[2] == static_cast<float>(n - 1), "hvd::broadcast");
  try {
    ctx.allgather(Tensor::full({2, r + 1}, 0.0f));
    expect(n == 1, "hvd::allgather of other trailing shapes must fail");
  } catch (const Error& e) {
    expect(std::string(e.what()).find("only the first dimension may differ") != std::string::npos, e.what());
  }
}

std::unique_ptr<Model> momentum_mlp(uint64_t seed) {
  auto m = std::make_unique<Sequential>(SequentialOptions{.seed = seed});
  m->add(layers::Dense(16, "relu", {.input_shape = Shape{6}}));
  m->add(layers::Dense(4));
  return m;
}

// Rows [0, 96) of a dataset in global batches of `global`: under the strategy, each process gets
// its share of every global batch; the hvd processes read those shares as their own data, in
// local batches of global ÷ (processes × passes).
void hvd_against_strategy(std::shared_ptr<Communicator> world, const hvd::Context& ctx, int passes) {
  int r = ctx.rank(), n = ctx.size();
  int64_t rows = 96, global = 24 * passes, share = global / n;
  Tensor x = tandem::testing::random_tensor({rows, 6}, 5);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  Tensor y = Tensor::from_vector({rows}, std::span<const int32_t>(labels));
  auto loss = Loss::sparse_categorical_crossentropy(true);

  distribute::MultiWorkerMirroredStrategy strategy({.threads_per_replica = 1, .workers = world});
  std::unique_ptr<Model> want;
  {
    distribute::Strategy::Scope scope(&strategy);
    want = momentum_mlp(3);
  }
  want->compile(optimizers::SGD(0.1f, {.momentum = 0.9f}), loss);
  History want_history = want->fit(x, y, {.epochs = 2, .batch_size = global, .shuffle = false, .verbose = 0});

  std::vector<float> all_x = x.to_vector(), my_x;
  std::vector<int32_t> my_y;
  for (int64_t b = 0; b < rows; b += global)
    for (int64_t i = b + r * share; i < b + (r + 1) * share; ++i) {
      my_x.insert(my_x.end(), all_x.begin() + i * 6, all_x.begin() + (i + 1) * 6);
      my_y.push_back(labels[static_cast<size_t>(i)]);
    }
  auto my_rows = static_cast<int64_t>(my_y.size());
  auto got = momentum_mlp(3 + static_cast<uint64_t>(r));  // other weights until the broadcast
  got->compile(
      hvd::DistributedOptimizer(std::make_unique<optimizers::SGD>(0.1f, optimizers::SGDOptions{.momentum = 0.9f}),
                                {.backward_passes_per_step = passes,
                                 .average_aggregated_gradients = true,
                                 .fusion_bytes = 256,
                                 .context = &ctx}),
      loss);
  FitOptions options{.epochs = 2, .batch_size = share / passes, .shuffle = false, .verbose = 0};
  options.callbacks = {std::make_shared<hvd::BroadcastGlobalVariables>(0, &ctx),
                       std::make_shared<hvd::MetricAverage>(&ctx)};
  History got_history = got->fit(Tensor::from_vector({my_rows, 6}, std::span<const float>(my_x)),
                                 Tensor::from_vector({my_rows}, std::span<const int32_t>(my_y)), options);

  std::vector<Variable*> a = got->variables(), b = want->variables();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<float> u = a[i]->value.to_vector(), v = b[i]->value.to_vector();
    for (size_t j = 0; j < u.size(); ++j)
      worst = std::max(worst, std::fabs(u[j] - v[j]) / (1e-6 + 1e-5 * std::fabs(v[j])));
  }
  expect(worst <= 1.0, fmt::format("hvd ({} passes): a weight differs by {} × (1e-6 + 1e-5 × |value|)", passes, worst));
  expect(got->optimizer().iterations() == want->optimizer().iterations(),
         fmt::format("hvd ({} passes): {} updates, the strategy {}", passes, got->optimizer().iterations(),
                     want->optimizer().iterations()));
  double l = got_history["loss"].back(), m = want_history["loss"].back();
  expect(std::fabs(l - m) <= 1e-5 * std::fabs(m), fmt::format("hvd ({} passes): averaged loss {} != {}", passes, l, m));
  std::printf("rank %d: %d passes: largest difference %g × (1e-6 + 1e-5 × |value|)\n", r, passes, worst);
}

}  // namespace

void train_uneven(std::shared_ptr<Communicator> world, int64_t rows) {
  MultiWorkerMirroredStrategy strategy({.threads_per_replica = 1, .workers = std::move(world)});
  train(dropout_mlp, &strategy, Shape{6}, rows);
}

void hvd_scenario(std::shared_ptr<Communicator> world) {
  hvd::Context ctx(world);
  hvd_tensors(ctx);
  for (int passes : {1, 2}) hvd_against_strategy(world, ctx, passes);
  std::printf("rank %d: %s\n", world->rank(), failures == 0 ? "hvd matches the strategy" : "hvd DIFFERS");
}

}  // namespace tandem::mpi_check
