// Model files as Keras itself writes them (model.to_json()): Keras 2 (tf.keras 2.13, with module
// and registered_name) and Keras 3 layouts of the first tutorial's CNN. `tandem summary` reads
// both and gives Keras' own parameter counts (conv 320, dense 346,176 and 650: 347,146).
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli/cli_util.h"
#include "tandem/io.h"
#include "test_util.h"

namespace tandem {
namespace {

std::string summary_of(const testing::TempDir& dir, const std::string& json) {
  std::ofstream(dir.file("model.json")) << json;
  std::string command =
      std::string(TANDEM_CLI) + " summary --model " + dir.file("model.json") + " > " + dir.file("out.txt") + " 2>&1";
  int status = std::system(command.c_str());
  return (status == 0 ? "" : "exit " + std::to_string(status) + ": ") + io::read_file(dir.file("out.txt"));
}

TEST(KerasFiles, Keras2AndKeras3ModelsOfTheTutorialCnnRead) {
  testing::TempDir dir;
  const std::string keras2 = R"({"class_name": "Sequential", "config": {"name": "sequential", "layers": [
    {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_input_shape": [null, 28, 28, 1], "dtype": "float32",
     "sparse": false, "ragged": false, "name": "conv2d_input"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Conv2D", "config": {"name": "conv2d", "trainable": true, "dtype": "float32",
     "batch_input_shape": [null, 28, 28, 1], "filters": 32, "kernel_size": [3, 3], "strides": [1, 1], "padding": "valid",
     "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1, "activation": "relu", "use_bias": true,
     "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
     "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
     "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null,
     "bias_constraint": null}, "registered_name": null, "build_config": {"input_shape": [null, 28, 28, 1]}},
    {"module": "keras.layers", "class_name": "MaxPooling2D", "config": {"name": "max_pooling2d", "trainable": true, "dtype": "float32",
     "pool_size": [2, 2], "padding": "valid", "strides": [2, 2], "data_format": "channels_last"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Flatten", "config": {"name": "flatten", "trainable": true, "dtype": "float32",
     "data_format": "channels_last"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense", "trainable": true, "dtype": "float32", "units": 64,
     "activation": "relu", "use_bias": true,
     "kernel_initializer": {"class_name": "VarianceScaling", "config": {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform", "seed": null}},
     "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null, "bias_regularizer": null,
     "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null}},
    {"module": "keras.layers", "class_name": "Dropout", "config": {"name": "dropout", "trainable": true, "dtype": "float32",
     "rate": 0.2, "noise_shape": null, "seed": null}},
    {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense_1", "trainable": true, "dtype": "float32", "units": 10,
     "activation": "linear", "use_bias": true, "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}},
     "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": null, "bias_regularizer": null,
     "activity_regularizer": null, "kernel_constraint": null, "bias_constraint": null}}]},
    "keras_version": "2.13.1", "backend": "tensorflow"})";
  std::string out = summary_of(dir, keras2);
  EXPECT_NE(out.find("Total params: 347,146"), std::string::npos) << out;
  EXPECT_NE(out.find("(None, 26, 26, 32)"), std::string::npos) << out;

  const std::string policy =
      R"({"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": null})";
  const std::string keras3 =
      R"({"module": "keras", "class_name": "Sequential", "config": {"name": "sequential", "trainable": true,
    "dtype": )" +
      policy + R"(, "layers": [
    {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [null, 28, 28, 1], "dtype": "float32",
     "sparse": false, "name": "input_layer"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Conv2D", "config": {"name": "conv2d", "trainable": true, "dtype": )" +
      policy + R"(,
     "filters": 32, "kernel_size": [3, 3], "strides": [1, 1], "padding": "valid", "data_format": "channels_last",
     "dilation_rate": [1, 1], "groups": 1, "activation": "relu", "use_bias": true,
     "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
     "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
     "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null, "kernel_constraint": null,
     "bias_constraint": null}, "registered_name": null, "build_config": {"input_shape": [null, 28, 28, 1]}},
    {"module": "keras.layers", "class_name": "MaxPooling2D", "config": {"name": "max_pooling2d", "trainable": true,
     "dtype": )" +
      policy + R"(, "pool_size": [2, 2], "padding": "valid", "strides": [2, 2], "data_format": "channels_last"},
     "registered_name": null},
    {"module": "keras.layers", "class_name": "Flatten", "config": {"name": "flatten", "trainable": true, "dtype": )" +
      policy + R"(,
     "data_format": "channels_last"}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense", "trainable": true, "dtype": )" +
      policy + R"(,
     "units": 64, "activation": "relu", "use_bias": true,
     "kernel_initializer": {"module": "keras.initializers", "class_name": "HeNormal", "config": {"seed": null}, "registered_name": null},
     "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
     "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null, "bias_constraint": null}, "registered_name": null},
    {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense_1", "trainable": true, "dtype": )" +
      policy + R"(,
     "units": 10, "activation": "softmax", "use_bias": true,
     "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, "registered_name": null},
     "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": null},
     "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null, "bias_constraint": null}, "registered_name": null}],
    "build_input_shape": [null, 28, 28, 1]}, "registered_name": null, "build_config": {"input_shape": [null, 28, 28, 1]}})";
  out = summary_of(dir, keras3);
  EXPECT_NE(out.find("Total params: 347,146"), std::string::npos) << out;
}

// Some Keras 2 files carry batch_input_shape on layers after the first; Keras' Sequential uses the
// first layer's alone, and so does `tandem fit`, with a note at --verbose 2 where one disagrees.
TEST(KerasFiles, Keras2BatchInputShapeOnALaterLayerIsIgnoredWithANote) {
  testing::TempDir dir;
  auto dense = [](const std::string& name, int units, const std::string& shape) {
    return R"({"class_name": "Dense", "config": {"name": ")" + name + R"(", "batch_input_shape": [null, )" + shape +
           R"(], "units": )" + std::to_string(units) + R"(, "activation": "relu"}})";
  };
  std::ofstream(dir.file("model.json")) << R"({"class_name": "Sequential", "config": {"layers": [)" +
                                               dense("dense", 32, "784") + ", " + dense("dense_1", 10, "100") +
                                               R"(]}, "keras_version": "2.4.0"})";
  testing::make_mnist(dir.file("data/mnist"), 64, 16);
  auto out = testing::run({"fit", "--model", dir.file("model.json"), "--data-dir", dir.file("data"), "--epochs", "1",
                           "--verbose", "2", "--checkpoint-dir", "", "--log-dir", ""},
                          dir);
  ASSERT_EQ(out.code, 0) << out.output;
  EXPECT_NE(out.output.find("note: Dense \"dense_1\" in " + dir.file("model.json") +
                            " declares input shape (100,), and its input is (32,)"),
            std::string::npos)
      << out.output;
  EXPECT_NE(out.output.find("ignored, as Keras uses the first layer's alone"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("Test loss:"), std::string::npos) << out.output;
}

}  // namespace
}  // namespace tandem
