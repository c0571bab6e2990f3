// Keras model files through the library (tandem/model_json.h): a Keras 2 file whose later layers
// carry batch_input_shape loads as Keras loads it, and Sequential::to_json writes what
// model_from_json reads back to the same model, weights and all.
#include <gtest/gtest.h>

#include "tandem/tandem.h"

namespace tandem {
namespace {

using namespace layers;

std::string dense(const std::string& name, int units, const std::string& extra) {
  return R"({"class_name": "Dense", "config": {"name": ")" + name + R"(", "trainable": true, "dtype": "float32", )" +
         extra + R"("units": )" + std::to_string(units) +
         R"(, "activation": "relu", "use_bias": true, "kernel_initializer": {"class_name": "GlorotUniform",
         "config": {"seed": null}}, "bias_initializer": {"class_name": "Zeros", "config": {}},
         "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
         "kernel_constraint": null, "bias_constraint": null}})";
}

TEST(ModelJson, Keras2BatchInputShapeOnLaterLayersIsIgnoredAsKerasDoes) {
  std::string text = R"({"class_name": "Sequential", "config": {"name": "sequential", "layers": [)" +
                     dense("dense", 128, R"("batch_input_shape": [null, 784], )") + ", " +
                     dense("dense_1", 64, R"("batch_input_shape": [null, 999], )") + ", " +
                     dense("dense_2", 10, R"("batch_input_shape": [null, 64], )") +
                     R"(]}, "keras_version": "2.11.0", "backend": "tensorflow"})";
  std::vector<IgnoredInputShape> ignored;
  auto model = model_from_json(text, {.seed = 3, .ignored_input_shapes = &ignored});
  ASSERT_EQ(model->layers().size(), 3u);
  EXPECT_EQ(model->layers()[0]->declared_input_shape(), std::optional<Shape>(Shape{784}));
  ASSERT_EQ(ignored.size(), 2u);
  EXPECT_EQ(ignored[0].layer, 1u);
  EXPECT_EQ(ignored[0].declared, Shape{999});
  EXPECT_EQ(ignored[1].layer, 2u);
  EXPECT_EQ(ignored[1].declared, Shape{64});
  Tensor y = model->predict(Tensor::zeros({2, 784}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
}

TEST(ModelJson, ToJsonReadsBackToTheSameModelAndWeights) {
  Sequential model({.name = "round_trip", .seed = 9});
  model.add(Conv2D(8, 3, {.strides = 1, .padding = "same", .activation = "relu", .input_shape = Shape{12, 12, 1}}));
  model.add(BatchNormalization({.momentum = 0.9f, .epsilon = 1e-5f}));
  model.add(MaxPooling2D(2));
  model.add(Conv2D(4, Size2(3, 2), {.strides = Size2(2, 1), .kernel_initializer = "he_normal"}));
  model.add(AveragePooling2D(Size2(2, 1), {.strides = Size2(1, 1), .padding = "same"}));
  model.add(Flatten());
  model.add(Dense(16, "elu", {.use_bias = false, .kernel_initializer = "lecun_normal"}));
  model.add(Dropout(0.25f));
  model.add(layers::Activation("tanh"));
  model.add(Dense(3, "softmax"));
  std::string text = model.to_json();
  auto back = model_from_json(text, {.seed = 9});
  EXPECT_EQ(back->to_json(), text);
  EXPECT_EQ(back->summary(), model.summary());
  model.build(Shape{12, 12, 1});
  back->build(Shape{12, 12, 1});
  auto a = model.variables(), b = back->variables();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->name, b[i]->name);
    EXPECT_EQ(a[i]->value.to_vector(), b[i]->value.to_vector()) << a[i]->name;
  }
}

// A layer under Keras' mixed_bfloat16 policy keeps it through the file, in Keras 2's Policy object;
// Keras 3's DTypePolicy and the name alone are read too, and mixed_float16 is refused naming the layer.
TEST(ModelJson, MixedPrecisionPoliciesAreReadAndWritten) {
  Sequential model({.name = "mixed", .seed = 2});
  model.add(Dense(8, "relu", {.input_shape = Shape{4}}));
  model.add(Dense(2));
  model.layers()[0]->set_dtype_policy("mixed_bfloat16");
  std::string text = model.to_json();
  EXPECT_NE(text.find(R"("dtype":{"class_name":"Policy","config":{"name":"mixed_bfloat16"}})"), std::string::npos)
      << text;
  auto back = model_from_json(text);
  EXPECT_EQ(back->layers()[0]->dtype_policy(), "mixed_bfloat16");
  EXPECT_EQ(back->layers()[1]->dtype_policy(), "float32");
  EXPECT_EQ(back->to_json(), text);
  auto with_dtype = [](const std::string& dtype) {
    return R"({"class_name": "Sequential", "config": {"name": "s", "layers": [{"class_name": "Dense", "config": )"
           R"({"name": "d", "units": 3, "batch_input_shape": [null, 4], "dtype": )" +
           dtype + "}}]}}";
  };
  EXPECT_EQ(model_from_json(with_dtype(R"({"module": "keras", "class_name": "DTypePolicy", "config": )"
                                       R"({"name": "mixed_bfloat16"}, "registered_name": null})"))
                ->layers()[0]
                ->dtype_policy(),
            "mixed_bfloat16");
  EXPECT_EQ(model_from_json(with_dtype(R"("mixed_bfloat16")"))->layers()[0]->dtype_policy(), "mixed_bfloat16");
  try {
    model_from_json(with_dtype(R"("mixed_float16")"));
    ADD_FAILURE() << "mixed_float16 was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Dense \"d\": 'mixed_float16' is not supported"), std::string::npos)
        << e.what();
  }
}

// Keras' "trainable": false is a frozen layer, read and written back; a non-boolean is named.
TEST(ModelJson, AFrozenLayerIsReadAndWrittenFrozen) {
  std::string frozen = dense("dense", 8, R"("batch_input_shape": [null, 4], )");
  frozen.replace(frozen.find(R"("trainable": true)"), 17, R"("trainable": false)");
  std::string text = R"({"class_name": "Sequential", "config": {"name": "sequential", "layers": [)" + frozen + ", " +
                     dense("dense_1", 2, "") + R"(]}})";
  auto model = model_from_json(text, {.seed = 3});
  EXPECT_FALSE(model->layers()[0]->trainable());
  EXPECT_TRUE(model->layers()[1]->trainable());
  EXPECT_EQ(model->trainable_variables().size(), 2u);
  auto again = model_from_json(model->to_json(), {.seed = 3});
  EXPECT_FALSE(again->layers()[0]->trainable());
  EXPECT_TRUE(again->layers()[1]->trainable());
  std::string bad = text;
  bad.replace(bad.find(R"("trainable": false)"), 18, R"("trainable": "no")");
  std::string error;
  try {
    model_from_json(bad, {.seed = 3});
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find(R"("trainable" is "no", of the wrong type)"), std::string::npos) << error;
}

TEST(ModelJson, BadTextIsNamed) {
  auto message = [](const std::string& text) {
    try {
      model_from_json(text, {.source = "the test's text"});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{\"layers\": ").find("the test's text is not valid JSON"), std::string::npos);
  EXPECT_NE(message("[1, 2]").find("the test's text must be a JSON object, not array"), std::string::npos);
  EXPECT_NE(message("{\"layers\": [1e999]}").find("the test's text is not valid JSON"), std::string::npos);
  EXPECT_NE(message("{\"layers\": []}").find("needs a non-empty \"layers\" array"), std::string::npos);
  EXPECT_NE(message(R"({"layers": [{"class_name": 3}]})").find("layer 0: needs \"class_name\""), std::string::npos);
  EXPECT_THROW(load_model_json("/no/such/model.json"), Error);
}

}  // namespace
}  // namespace tandem
