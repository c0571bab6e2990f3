// `tandem fit --model resnet20` (He et al.'s ResNet-20, a functional model) on small generated
// MNIST (28×28 grey images padded to 32×32, the channel repeated): deterministic mirrored replicas
// and two worker processes end with one replica's bits. Parameter servers hold trainable variables
// only: batch normalization's moving statistics are refused by name (not built yet).
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

TEST(ResNet20, ParameterServersRefuseItsMovingStatisticsByName) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 64, 16);
  std::vector<std::string> ps{TANDEM_CLI};
  for (const std::string& a : resnet_args(dir, "ps-async:1x2:threads", dir.file("ps"))) ps.push_back(a);
  Watched refused = run_watched(ps, dir, 240, "ps.log");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.output.find("batch_normalization/moving_mean\" is not trainable"), std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace tandem::testing
