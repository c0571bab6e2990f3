// `tandem fit --model resnet20` (He et al.'s ResNet-20, a functional model) on small generated
// MNIST (28×28 grey images padded to 32×32, the channel repeated): deterministic mirrored replicas
// and two worker processes end with one replica's bits. Under parameter servers (in process), one
// asynchronous worker ends with one process's bits, moving statistics included (they live in the
// chief's model, moved by the workers' results); two workers train, and a record of their order
// replays to the same bits. A pipeline of 3 stages (one micro-batch) cuts it between blocks and
// trains as one process does, and plain mirrored replicas train it.
#include <cmath>
#include <map>

#include "distribute/launch_util.h"

namespace tandem::testing {
namespace {

// One epoch of 4 batches of 16 on 64 training rows, 1 thread, seed 3.
std::vector<std::string> resnet_args(const TempDir& dir, const std::string& strategy, const std::string& checkpoints) {
  return {"fit",
          "--model",
          "resnet20",
          "--data-dir",
          dir.file("data"),
          "--epochs",
          "1",
          "--batch-size",
          "16",
          "--strategy",
          strategy,
          "--checkpoint-dir",
          checkpoints,
          "--log-dir",
          "",
          "--threads",
          "1",
          "--seed",
          "3",
          "--verbose",
          "0",
          "--timeout",
          "60"};
}

TEST(ResNet20, DeterministicReplicasAndWorkersEndWithOneReplicasBits) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 64, 16);
  std::vector<std::string> one{TANDEM_CLI};
  for (const std::string& a : resnet_args(dir, "mirrored:1:deterministic", dir.file("one"))) one.push_back(a);
  Watched reference = run_watched(one, dir, 240, "one.log");
  ASSERT_EQ(reference.code, 0) << reference.output;
  EXPECT_NE(reference.output.find("padded to 32x32, the grey channel repeated three times"), std::string::npos)
      << reference.output;
  std::vector<std::string> two{TANDEM_CLI};
  for (const std::string& a : resnet_args(dir, "mirrored:2:deterministic", dir.file("two"))) two.push_back(a);
  Watched mirrored = run_watched(two, dir, 240, "two.log");
  ASSERT_EQ(mirrored.code, 0) << mirrored.output;
  expect_same_final_weights(dir.file("one/final.safetensors"), dir.file("two/final.safetensors"), "2 replicas");
  if (std::string why = why_no_mpi(distribute::mpi_built()); !why.empty()) GTEST_SKIP() << why;
  Watched workers = run_watched(launched(2, resnet_args(dir, "multiworker:deterministic", dir.file("w2"))), dir, 240);
  ASSERT_EQ(workers.code, 0) << workers.output;
  expect_same_final_weights(dir.file("one/final.safetensors"), dir.file("w2/final.safetensors"), "2 workers");
}

TEST(ResNet20, ParameterServersTrainItWithItsMovingStatistics) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 64, 16);
  auto fit = [&](const std::string& strategy, const std::string& out, std::vector<std::string> more = {}) {
    std::vector<std::string> argv{TANDEM_CLI};
    for (const std::string& a : resnet_args(dir, strategy, dir.file(out))) argv.push_back(a);
    argv.insert(argv.end(), more.begin(), more.end());
    Watched w = run_watched(argv, dir, 240, out + ".log");
    EXPECT_EQ(w.code, 0) << w.output;
    return w.code == 0;
  };
  ASSERT_TRUE(fit("default", "one"));
  ASSERT_TRUE(fit("ps-async:1x1:threads", "ps1"));
  expect_same_final_weights(dir.file("one/final.safetensors"), dir.file("ps1/final.safetensors"), "one worker");

  ASSERT_TRUE(fit("ps-async:1x2:threads", "ps2", {"--record", dir.file("ps2.record")}));
  ASSERT_TRUE(fit("ps-async:1x2:threads", "replayed", {"--replay", dir.file("ps2.record")}));
  expect_same_final_weights(dir.file("ps2/final.safetensors"), dir.file("replayed/final.safetensors"), "replayed");
  int moving = 0;
  for (const auto& [name, values] : final_state(dir.file("ps2/final.safetensors")))
    if (name.ends_with("moving_mean")) {
      ++moving;
      EXPECT_TRUE(std::any_of(values.begin(), values.end(), [](float v) { return v != 0.0f; }))
          << name << " never moved";
    }
  EXPECT_EQ(moving, 21) << "ResNet-20's batch normalization layers: 1 + 9 blocks × 2 + 2 shortcuts";
}

TEST(ResNet20, APipelineCutsItBetweenBlocksAndMirroredReplicasTrainIt) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 64, 16);
  std::map<std::string, std::vector<std::pair<std::string, std::vector<float>>>> weights;
  for (const char* strategy : {"default", "pipeline:3:1", "mirrored:2"}) {
    std::vector<std::string> argv{TANDEM_CLI};
    for (const std::string& a : resnet_args(dir, strategy, dir.file(strategy))) argv.push_back(a);
    Watched w = run_watched(argv, dir, 240, std::string(strategy) + ".log");
    ASSERT_EQ(w.code, 0) << strategy << "\n" << w.output;
    weights[strategy] = final_state(dir.file(std::string(strategy) + "/final.safetensors"));
  }
  const auto &one = weights["default"], &staged = weights["pipeline:3:1"];
  ASSERT_EQ(staged.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    float scale = 0;
    for (float v : one[i].second) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < one[i].second.size(); ++k)
      ASSERT_LE(std::fabs(staged[i].second[k] - one[i].second[k]), 1e-4f * scale + 1e-6f)
          << one[i].first << "[" << k << "]";
  }
  EXPECT_EQ(weights["mirrored:2"].size(), one.size());
}

}  // namespace
}  // namespace tandem::testing
