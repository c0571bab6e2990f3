// The `tandem` command as a user meets it: help, flags and their errors, model presets and Keras
// model files (each attribute honoured or refused), and what it says about a run.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "tandem/cuda.h"

namespace tandem {
namespace {

using testing::make_mnist;
using testing::Outcome;
using testing::run;

TEST(Cli, HelpListsEveryFlagWithItsDefault) {
  testing::TempDir dir;
  Outcome r = run({"fit", "--help"}, dir);
  EXPECT_EQ(r.code, 0);
  for (const char* flag :
       {"--model TEXT:PRESET|FILE=mlp", "--dataset TEXT:{mnist,fashion-mnist,cifar10}=mnist",
        "--epochs INT:INT in [1 - 1000000]=10", "--batch-size", "=32", "--run-dir", "default: a new runs/<model>-N",
        "--checkpoint-dir", "default: <run-dir>/checkpoints", "--log-dir", "default: <run-dir>/logs", "--report",
        "--threads", "--seed UINT=0", "--learning-rate", "--optimizer"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << "\n" << r.output;
}

TEST(Cli, BadFlagsAndValuesAreRejected) {
  testing::TempDir dir;
  Outcome r = run({"fit", "--epochs", "0"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--epochs: Value 0 not in range 1 to 1000000"), std::string::npos) << r.output;
  r = run({"fit", "--optimiser", "adam"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--optimiser"), std::string::npos) << r.output;
  r = run({"fit", "--model", "resnet"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("not a preset (mlp, mlp5, cnn, cnn-fast, cifar-mlp, resnet20)"), std::string::npos)
      << r.output;
  r = run({"frobnicate"}, dir);
  EXPECT_NE(r.code, 0);
  r = run({"fit", "--data-dir", dir.path(), "--dataset", "fashion-mnist"}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("error: load_dataset: \"fashion-mnist\" not found; searched " + dir.path() +
                          "/fashion-mnist, ./data/fashion-mnist"),
            std::string::npos)
      << r.output;
}

// --device: a GPU this build or machine lacks is refused before anything is made, with the reason;
// a malformed name, a multi-replica strategy on a GPU and --tf32 on the CPU too. (On a GPU: tests/cuda.)
TEST(Cli, DeviceFlagNamesWhatIsMissing) {
  testing::TempDir dir;
  make_mnist(dir.path(), 64, 16);
  Outcome r = run({"fit", "--device", "gpu:x"}, dir);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--device: not cpu, cuda or cuda:N: gpu:x"), std::string::npos) << r.output;
  r = run({"fit", "--device", "cuda:63", "--data-dir", dir.path(), "--run-dir", dir.file("run")}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("error: --device cuda:63: "), std::string::npos) << r.output;
  EXPECT_TRUE(r.output.find("this build of Tandem has no CUDA device") != std::string::npos ||
              r.output.find("no GPU can be used here") != std::string::npos ||
              r.output.find("this machine has") != std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run"))) << "refused before the run directory is made";
  if (cuda::device_count() < 2) {  // mirrored:2 takes a GPU per replica: refused before a model is made
    r = run({"fit", "--device", "cuda", "--strategy", "mirrored:2", "--data-dir", dir.path()}, dir);
    EXPECT_EQ(r.code, 1);
    EXPECT_TRUE(r.output.find("error: --device cuda: ") != std::string::npos ||
                r.output.find("mirrored:2: 2 replicas, a device each, on the 1 device given (cuda:0...)") !=
                    std::string::npos)
        << r.output;
  }
  r = run({"fit", "--tf32", "--data-dir", dir.path(), "--run-dir", dir.file("run")}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--tf32: TF32 products are a GPU's, and --device is cpu"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run"))) << "refused before the run directory is made";
}

TEST(Cli, SummaryAndJsonModels) {
  testing::TempDir dir;
  Outcome r = run({"summary", "--model", "cnn"}, dir);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("conv2d (Conv2D)             (None, 26, 26, 32)        320"), std::string::npos) << r.output;
  std::ofstream(dir.file("m.json")) << R"({"class_name": "Sequential", "config": {"name": "tiny", "layers": [
      {"class_name": "Dense", "config": {"units": 16, "activation": "tanh", "batch_input_shape": [null, 784]}},
      {"class_name": "Dense", "config": {"units": 10, "activation": "softmax"}}]}})";
  r = run({"summary", "--model", dir.file("m.json")}, dir);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("Total params: 12,730"), std::string::npos) << r.output;
  std::ofstream(dir.file("bad.json"))
      << R"({"layers": [{"class_name": "Dense", "config": {"units": 4, "activation": "relu6"}}]})";
  r = run({"summary", "--model", dir.file("bad.json")}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("unknown activation \"relu6\""), std::string::npos) << r.output;
}

// Issue 11, item 2: every attribute of a model file is honoured or, when Tandem does not implement
// it and it is not Keras' default, refused naming the layer, the attribute and the value (before,
// dilation_rate, a bogus Conv2D initializer and regularizers were silently ignored).
TEST(Cli, ModelFileAttributesAreHonouredOrRefused) {
  testing::TempDir dir;
  auto model = [&](const std::string& conv_extra, const std::string& dense_extra) {
    std::ofstream(dir.file("m.json")) << R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
        {"class_name": "Conv2D", "config": {"name": "conv", "filters": 4, "kernel_size": [3, 3], "batch_input_shape": [null, 28, 28, 1],
         "trainable": true, "dtype": "float32", "data_format": "channels_last", "groups": 1, "activation": "relu",
         "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": 2.0, "mode": "fan_in", "distribution": "truncated_normal", "seed": null}},
         "bias_initializer": {"class_name": "Constant", "config": {"value": 0.1}},
         "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null,
         "bias_constraint": null)" + conv_extra +
                                             R"(}},
        {"class_name": "Flatten", "config": {"name": "flat", "data_format": "channels_last"}},
        {"class_name": "Activation", "config": {"name": "act", "activation": {"module": "keras.src.activations.activations",
         "class_name": "function", "config": "relu", "registered_name": "function"}}},
        {"class_name": "Dense", "config": {"name": "out", "units": 10, "activation": "softmax")" +
                                             dense_extra + R"(}}]}})";
    return run({"summary", "--model", dir.file("m.json")}, dir);
  };
  Outcome r = model(R"(, "dilation_rate": [1, 1])", "");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(None, 26, 26, 4)"), std::string::npos) << r.output;
  // Keras 3 writes the input shape on an InputLayer, and dtypes as DTypePolicy objects.
  std::ofstream(dir.file("k3.json"))
      << R"({"module": "keras", "class_name": "Sequential", "config": {"name": "k3", "layers": [
      {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [null, 784], "dtype": "float32", "sparse": false,
       "name": "input_layer"}, "registered_name": null},
      {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense", "trainable": true,
       "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null},
       "units": 10, "activation": "softmax", "use_bias": true,
       "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
       "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
       "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null, "bias_constraint": null},
       "registered_name": null, "build_config": {"input_shape": [null, 784]}}]}})";
  r = run({"summary", "--model", dir.file("k3.json")}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Total params: 7,850"), std::string::npos) << r.output;
  struct Bad {
    std::string conv, dense, message;
  };
  for (
      const Bad& bad :
      {Bad{R"(, "dilation_rate": [2, 2])", "",
           R"(layer 0 ("conv", Conv2D): "dilation_rate" is [2,2]; Tandem implements only 1)"},
       Bad{R"(, "strides": 1, "kernel_initializer": "bogus")", "", "bogus"},
       Bad{"", R"(, "kernel_constraint": {"class_name": "NonNeg", "config": {}})",
           R"(layer 3 ("out", Dense): "kernel_constraint" is {"class_name":"NonNeg","config":{}}; Tandem implements only null)"},
       Bad{"", R"(, "kernel_regularizer": {"class_name": "OrthogonalRegularizer", "config": {"factor": 0.01}})",
           R"(Tandem implements the regularizers L1, L2 and L1L2)"},
       Bad{"", R"(, "kernel_initializer": {"class_name": "RandomNormal", "config": {"stdev": 0.5}})",
           R"(initializer random_normal takes no argument "stdev" (given "0.5"))"},
       Bad{"", R"(, "kernel_initializer": {"class_name": "HeNormal", "config": {"seed": 42}})",
           R"("kernel_initializer" sets a seed (42); Tandem draws every weight from the model's seed)"},
       Bad{"", R"(, "units_typo": 3)", R"(layer 3 ("out", Dense): unknown attribute "units_typo" (3))"}}) {
    r = model(bad.conv, bad.dense);  // a key given twice: the JSON reader keeps the later value
    EXPECT_EQ(r.code, 1) << bad.message << "\n" << r.output;
    EXPECT_NE(r.output.find(bad.message), std::string::npos) << r.output;
  }
}

// Issue 11, item 1: a model file whose softmax is a layer of its own trains as the one with the
// softmax inside the Dense (before, the CLI chose a from-logits loss for it: softmax twice, loss
// 1.59 against 0.31 after an epoch of MNIST).
TEST(Cli, ASoftmaxLayerOfItsOwnIsAppliedOnce) {
  testing::TempDir dir;
  make_mnist(dir.file("mnist"), 600, 100);
  std::ofstream(dir.file("inside.json")) << R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
      {"class_name": "Dense", "config": {"units": 16, "activation": "relu", "batch_input_shape": [null, 784]}},
      {"class_name": "Dense", "config": {"units": 10, "activation": "softmax"}}]}})";
  std::ofstream(dir.file("own.json")) << R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
      {"class_name": "Dense", "config": {"units": 16, "activation": "relu", "batch_input_shape": [null, 784]}},
      {"class_name": "Dense", "config": {"units": 10, "activation": "linear"}},
      {"class_name": "Activation", "config": {"activation": "softmax"}}]}})";
  std::vector<double> losses;
  for (const char* model : {"inside.json", "own.json"}) {
    Outcome r = run({"fit", "--model", dir.file(model), "--data-dir", dir.path(), "--epochs", "2", "--threads", "1",
                     "--checkpoint-dir", "", "--log-dir", "", "--report", dir.file("r.json"), "--verbose", "0"},
                    dir);
    ASSERT_EQ(r.code, 0) << r.output;
    losses.push_back(nlohmann::json::parse(io::read_file(dir.file("r.json")))["final_training_loss"].get<double>());
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-4);
}

// Issue 11, item 7: the small things a user met.
TEST(Cli, SaysWhatItUsedAndFailsEarly) {
  testing::TempDir dir;
  make_mnist(dir.file("mnist"), 300, 100);
  Outcome r = run({"fit", "--strategy", "one_device:3"}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("\"one_device\" takes no replica count or options"), std::string::npos) << r.output;
  r = run({"fit", "--help"}, dir);
  EXPECT_NE(r.output.find("central[:N[:deterministic]]"), std::string::npos) << r.output;
  r = run({"fit", "--data-dir", dir.path(), "--epochs", "1", "--checkpoint-dir", dir.file("ck"), "--log-dir",
           dir.file("logs"), "--report", dir.file("r.json"), "--seed", "5", "--verbose", "1"},
          dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Data: " + dir.path() + "/mnist"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("logs/validation"))) << "an empty validation event file";
  auto report = nlohmann::json::parse(io::read_file(dir.file("r.json")));
  EXPECT_EQ(report["seed"], 5);
  EXPECT_GE(report["threads"]["ceiling"].get<int>(), 1);
  EXPECT_FALSE(report["tandem_version"].get<std::string>().empty());
  EXPECT_NEAR(report["initial_learning_rate"].get<double>(), 0.001, 1e-9);
  r = run({"evaluate", "--data-dir", dir.path(), "--weights", dir.file("ck")}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Weights: " + dir.file("ck") + "/final.safetensors"), std::string::npos) << r.output;
  std::ofstream(dir.file("afile")) << "not a directory";
  r = run({"fit", "--data-dir", dir.path(), "--epochs", "1", "--checkpoint-dir", dir.file("afile/ck"), "--log-dir", "",
           "--verbose", "1"},
          dir);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(r.output.find("Epoch 1/1"), std::string::npos) << "failed only after training: " << r.output;
}

}  // namespace
}  // namespace tandem
