// Models that are graphs (Keras' functional API): tracing, residual connections and shared layers
// computing what the same ops compute by hand (their gradients summed where a tensor is read
// twice), the merge and spatial layers, summary's "Connected to", mistakes named, and training
// under the data-parallel strategies as on one device.
#include <optional>

#include "tandem/distribute/model_parallel.h"
#include "tandem/distribute/pipeline.h"
#include "tandem/graph.h"
#include "tandem/model.h"
#include "test_util.h"
#include "train/under_strategy.h"

namespace tandem {
namespace {

using namespace layers;

// Input(5) → h = Dense(4, relu) → a = Dense(4)(h) → Add(h, a) → Dense(3): h is read twice.
std::unique_ptr<Model> residual_mlp(uint64_t seed = 3) {
  SymbolicTensor x = Input({5});
  SymbolicTensor h = Dense(4, "relu")(x);
  SymbolicTensor a = Dense(4)(h);
  SymbolicTensor s = Add()({h, a});
  return std::make_unique<Functional>(x, Dense(3)(s), ModelOptions{.seed = seed});
}

// Per variable, the loss's gradient (the sum of the outputs times fixed weights) through the tape.
std::vector<std::vector<float>> gradients(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x,
                                          const std::vector<Variable*>& vars) {
  GradientTape tape;
  Tensor y = forward(x);
  Tensor w = testing::random_tensor(y.shape(), 11);
  Tensor loss = ops::sum(ops::mul(y, w));
  std::vector<Tensor> sources, grads(vars.size());
  for (Variable* v : vars) sources.push_back(v->value);
  tape.gradient(loss, sources, grads);
  std::vector<std::vector<float>> out;
  for (const Tensor& g : grads) out.push_back(g.to_vector());
  return out;
}

TEST(Functional, AResidualConnectionComputesWhatItsOpsComputeWithGradientsSummed) {
  auto model = residual_mlp();
  ASSERT_EQ(model->layers().size(), 4u);
  EXPECT_EQ(model->count_params(), 5 * 4 + 4 + 4 * 4 + 4 + 4 * 3 + 3);
  std::vector<Variable*> v = model->variables();
  ASSERT_EQ(v.size(), 6u);
  auto by_hand = [&](const Tensor& x) {
    Tensor h = ops::dense(x, v[0]->value, v[1]->value, tandem::Activation::ReLU);
    Tensor a = ops::dense(h, v[2]->value, v[3]->value, tandem::Activation::Linear);
    return ops::dense(ops::add(h, a), v[4]->value, v[5]->value, tandem::Activation::Linear);
  };
  Tensor x = testing::random_tensor({7, 5}, 4);
  EXPECT_EQ((*model)(x).to_vector(), by_hand(x).to_vector());
  auto through_model = gradients([&](const Tensor& in) { return (*model)(in, true); }, x, v);
  auto through_ops = gradients(by_hand, x, v);
  EXPECT_EQ(through_model, through_ops);
  // A finite difference of one kernel entry agrees with the tape's gradient.
  Tensor w = testing::random_tensor({7, 3}, 11);
  auto loss = [&] {
    StopRecording no_tape;
    return static_cast<double>(ops::sum(ops::mul((*model)(x), w)).item());
  };
  float* k = v[0]->value.data<float>();
  const float saved = k[3], eps = 1e-2f;
  k[3] = saved + eps;
  double up = loss();
  k[3] = saved - eps;
  double down = loss();
  k[3] = saved;
  EXPECT_NEAR((up - down) / (2 * eps), through_model[0][3], 2e-3);
}

TEST(Functional, ASharedLayerIsOneLayerWhoseGradientsAddUp) {
  auto shared = std::make_shared<Dense>(4, "tanh");
  SymbolicTensor x = Input({4});
  SymbolicTensor twice = (*shared)((*shared)(x));
  Functional model(x, twice, {.seed = 8});
  ASSERT_EQ(model.layers().size(), 1u);
  ASSERT_EQ(model.graph()->nodes.size(), 2u);
  std::vector<Variable*> v = model.variables();
  auto by_hand = [&](const Tensor& in) {
    Tensor once = ops::dense(in, v[0]->value, v[1]->value, tandem::Activation::Tanh);
    return ops::dense(once, v[0]->value, v[1]->value, tandem::Activation::Tanh);
  };
  Tensor in = testing::random_tensor({6, 4}, 9);
  EXPECT_EQ(model(in).to_vector(), by_hand(in).to_vector());
  EXPECT_EQ(gradients([&](const Tensor& t) { return model(t, true); }, in, v), gradients(by_hand, in, v));
  std::string s = model.summary();
  EXPECT_NE(s.find("Connected to"), std::string::npos) << s;
  EXPECT_NE(s.find("input_layer[0][0]"), std::string::npos) << s;
  EXPECT_NE(s.find("dense[0][0]"), std::string::npos) << s;  // the second call reads the first's
}

TEST(Functional, AChainIsTheSequentialOfTheSameLayersToTheBit) {
  Sequential seq({.seed = 4});
  seq.add(Dense(6, "relu", {.input_shape = Shape{5}}));
  seq.add(Dropout(0.25f));
  seq.add(Dense(3, "softmax"));
  SymbolicTensor x = Input({5});
  Functional fun(x, Dense(3, "softmax")(Dropout(0.25f)(Dense(6, "relu")(x))), {.seed = 4});
  auto data = testing::labelled_rows(64, 5, 3, 1);
  for (Model* m : {static_cast<Model*>(&seq), static_cast<Model*>(&fun)}) {
    m->compile(optimizers::Adam(0.01f), "sparse_categorical_crossentropy");
    m->fit(data.x, data.y, {.epochs = 2, .batch_size = 16, .verbose = 0});
  }
  EXPECT_EQ(testing::weights_of(fun), testing::weights_of(seq));
}

TEST(Functional, TheMergeAndSpatialLayersComputeKerasShapes) {
  SymbolicTensor x = Input({6, 5, 2});
  SymbolicTensor padded = ZeroPadding2D(std::array<int64_t, 4>{1, 2, 0, 1})(x);
  EXPECT_EQ(padded.shape(), (Shape{9, 6, 2}));
  SymbolicTensor pooled = GlobalAveragePooling2D()(padded);
  EXPECT_EQ(pooled.shape(), (Shape{2}));
  EXPECT_EQ(GlobalAveragePooling2D({.keepdims = true})(x).shape(), (Shape{1, 1, 2}));
  SymbolicTensor joined = Concatenate()({pooled, Dense(3)(pooled)});
  EXPECT_EQ(joined.shape(), (Shape{5}));
  EXPECT_EQ(Concatenate(1)({x, x}).shape(), (Shape{12, 5, 2}));
  Functional model(x, Multiply()({joined, Subtract()({joined, joined})}), {.seed = 1});
  Tensor in = testing::random_tensor({3, 6, 5, 2}, 2);
  Tensor out = model(in);
  EXPECT_EQ(out.shape(), (Shape{3, 5}));
  for (float f : out.to_vector()) EXPECT_EQ(f, 0.0f);  // joined · (joined − joined)
  // Global average pooling is each channel's mean, the padding's zeros included.
  Functional gap(x, GlobalAveragePooling2D()(ZeroPadding2D(1)(x)));
  std::vector<float> values = in.to_vector(), means = gap(in).to_vector();
  for (int b = 0; b < 3; ++b)
    for (int c = 0; c < 2; ++c) {
      double s = 0;
      for (int i = 0; i < 30; ++i) s += values[static_cast<size_t>((b * 30 + i) * 2 + c)];
      EXPECT_NEAR(means[static_cast<size_t>(b * 2 + c)], s / (8 * 7), 1e-6);
    }
}

TEST(Functional, MistakesAreNamed) {
  SymbolicTensor x = Input({4}), other = Input({4});
  SymbolicTensor y = Add()({x, other});
  EXPECT_NE(testing::error_of([&] { Functional(x, y); }).find("needs an Input of shape (None, 4) that is not among"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              Add()({x, Input({5})});
            }).find("Add \"add\": its inputs must have one shape"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { Subtract()({x, x, x}); }).find("takes 2 inputs, got 3"), std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              (*std::make_shared<Dense>(3))(std::vector{x, x});
            }).find("takes one input, got a list of 2"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              Concatenate(0)({x, x});
            }).find("axis 0 is not a per-sample axis"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { Input({0, 3}); }).find("positive dimensions"), std::string::npos);
  Dense value(2);
  value(x);
  EXPECT_NE(testing::error_of([&] { value(x); }).find("Dense \"dense\": called a second time as a value"),
            std::string::npos);
  Functional model(x, Dense(2)(x));
  EXPECT_NE(testing::error_of([&] { model.add(Dense(2)); }).find("add() builds a Sequential"), std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              model(testing::random_tensor({2, 5}, 1));
            }).find("input has 5 features, expected 4"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { Functional({x}, {x, x}); }).find("two outputs come from"), std::string::npos);
  Add merge;
  merge.build_inputs(std::vector<Shape>{{4}, {4}}, 0);
  EXPECT_NE(testing::error_of([&] {
              merge.call(testing::random_tensor({2, 4}, 1), {});
            }).find("takes a list"),
            std::string::npos);
}

// A small residual network of every layer kind ResNets use: convolutions with and without bias,
// strides and padding, batch normalization, ReLU, an Add shortcut, zero padding, global pooling,
// a concatenation, softmax. Its batch normalization synchronized over replicas: the global
// batch's statistics, as on one device.
std::unique_ptr<Model> small_resnet() {
  SymbolicTensor x = Input({6, 6, 2});
  SymbolicTensor c1 = Conv2D(4, 3, {.padding = "same", .use_bias = false})(x);
  SymbolicTensor r1 = ReLU()(BatchNormalization({.synchronized = true})(c1));
  SymbolicTensor c2 = BatchNormalization({.synchronized = true})(Conv2D(4, 3, {.padding = "same"})(r1));
  SymbolicTensor block = ReLU()(Add()({r1, c2}));
  SymbolicTensor down = Conv2D(4, 3, {.strides = 2})(ZeroPadding2D(1)(block));
  SymbolicTensor g = GlobalAveragePooling2D()(down);
  SymbolicTensor joined = Concatenate()({g, Dense(2, "relu")(g)});
  return std::make_unique<Functional>(x, Dense(3, "softmax")(joined), ModelOptions{.seed = 6});
}

// `make`'s model trained under `strategy` for `epochs` on 48 rows of x's per-sample shape.
std::vector<std::vector<float>> trained(const std::string& strategy, int epochs = 2,
                                        const std::function<std::unique_ptr<Model>()>& make = small_resnet,
                                        const Shape& per_sample = {6, 6, 2}, Tensor x = {}) {
  auto run = testing::made_under(strategy, [&] {
    auto m = make();
    m->compile(optimizers::SGD(0.1f), "sparse_categorical_crossentropy");
    return m;
  });
  Shape shape{48};
  for (int64_t d : per_sample) shape.push_back(d);
  if (!x.defined()) x = testing::random_tensor(shape, 5);
  Tensor y = testing::labelled_rows(48, 1, 3, 1).y;
  run.model->fit(x, y, {.epochs = epochs, .batch_size = 16, .shuffle = false, .verbose = 0});
  return testing::weights_of(*run.model);
}

TEST(Functional, AResidualNetworkTrainsUnderTheDataParallelStrategiesAsOnOneDevice) {
  auto expect_close = [](const auto& many, const auto& one, const char* name) {
    ASSERT_EQ(many.size(), one.size()) << name;
    for (size_t i = 0; i < one.size(); ++i)
      for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(many[i][j], one[i][j], 2e-5) << name << " " << i;
  };
  auto one = trained("default");
  for (const char* name : {"mirrored:2", "mirrored:3", "central:2"}) expect_close(trained(name), one, name);
  // Parameter servers hold trainable variables only (no moving statistics): the residual mlp.
  auto mlp = [] { return residual_mlp(); };
  auto one_mlp = trained("default", 2, mlp, {5});
  for (const char* name : {"ps-sync:1x1:threads", "ps-sync:2x1:threads"})
    expect_close(trained(name, 2, mlp, {5}), one_mlp, name);
  // Deterministic: two replicas give one replica's bits (the batch statistics over the parts).
  EXPECT_EQ(trained("mirrored:2:deterministic"), trained("mirrored:1:deterministic"));
}

// An image and a vector: a convolution's pooled channels beside a Dense of the vector.
std::unique_ptr<Model> two_inputs() {
  SymbolicTensor image = Input({4, 4, 1}, "image"), extra = Input({3}, "extra");
  SymbolicTensor a = GlobalAveragePooling2D()(Conv2D(2, 3, {.padding = "same"})(image));
  SymbolicTensor b = Dense(2, "relu")(extra);
  return std::make_unique<Functional>(std::vector{image, extra},
                                      std::vector{Dense(3, "softmax")(Concatenate()({a, b}))}, ModelOptions{.seed = 2});
}

TEST(Functional, SeveralInputsTravelPackedAndTrainUnderTheStrategiesAsOnOneDevice) {
  auto model = two_inputs();
  EXPECT_EQ(model->declared_input_shape(), (Shape{19}));
  Tensor images = testing::random_tensor({5, 4, 4, 1}, 3), extras = testing::random_tensor({5, 3}, 4);
  Tensor packed = pack_inputs(std::vector{images, extras});
  ASSERT_EQ(packed.shape(), (Shape{5, 19}));
  std::vector<Variable*> v = model->variables();  // conv kernel, bias; dense; dense
  Tensor a = ops::reshape(
      ops::avg_pool2d(ops::conv2d(images, v[0]->value, v[1]->value, 1, 1, Padding::Same, tandem::Activation::Linear), 4,
                      4, 4, 4, Padding::Valid),
      {5, 2});
  Tensor b = ops::dense(extras, v[2]->value, v[3]->value, tandem::Activation::ReLU);
  Tensor by_hand = ops::dense(ops::concat(std::vector{a, b}, 1), v[4]->value, v[5]->value, tandem::Activation::Softmax);
  EXPECT_EQ((*model)(packed).to_vector(), by_hand.to_vector());
  EXPECT_NE(testing::error_of([&] {
              (*model)(testing::random_tensor({2, 18}, 1));
            }).find("a model of 2 inputs ((None, 4, 4, 1), (None, 3)) takes them packed as (rows, 19)"),
            std::string::npos);
  std::string s = model->summary();
  EXPECT_NE(s.find("image (InputLayer)"), std::string::npos) << s;
  EXPECT_NE(s.find("extra[0][0]"), std::string::npos) << s;
  Tensor x = pack_inputs(std::vector{testing::random_tensor({48, 4, 4, 1}, 5), testing::random_tensor({48, 3}, 6)});
  auto one = trained("default", 2, two_inputs, {19}, x);
  for (const char* name : {"mirrored:2", "central:2"}) {
    auto many = trained(name, 2, two_inputs, {19}, x);
    ASSERT_EQ(many.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i)
      for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(many[i][j], one[i][j], 2e-5) << name << " " << i;
  }
  EXPECT_EQ(trained("mirrored:2:deterministic", 2, two_inputs, {19}, x),
            trained("mirrored:1:deterministic", 2, two_inputs, {19}, x));
}

// small_resnet's layers: conv2d, batch_normalization, re_lu, conv2d_1, batch_normalization_1,
// add, re_lu_1, zero_padding2d, conv2d_2, global_average_pooling2d, dense, concatenate, dense_1.
// One tensor crosses before layers 1, 2, 3 (r1), 6 (the sum), 7, 8, 9, 10 and 12; the block's
// layers 4 and 5 (two tensors: r1 and the branch) and 11 (g and the dense) are not cuts.
TEST(Functional, APipelineCutsAGraphWhereOneTensorCrossesAndTrainsAsOneDevice) {
  auto model = small_resnet();
  std::vector<std::optional<int>> crossing = crossing_tensors(*model->graph(), model->layers().size());
  std::vector<size_t> places;
  for (size_t c = 0; c < crossing.size(); ++c)
    if (crossing[c]) places.push_back(c);
  EXPECT_EQ(places, (std::vector<size_t>{1, 2, 3, 6, 7, 8, 9, 10, 12}));
  // One micro-batch: the stages compute what one device does.
  auto one = trained("default");
  for (const char* name : {"pipeline:2:1", "pipeline:4:1"}) {
    auto staged = trained(name);
    ASSERT_EQ(staged.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i)
      for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(staged[i][j], one[i][j], 2e-5) << name << " " << i;
  }
  auto cut_at = [&](std::vector<int> cuts) {
    distribute::PipelineStrategy pipeline(
        {.num_stages = static_cast<int>(cuts.size()) + 1, .micro_batches = 2, .cuts = std::move(cuts)});
    auto scope = pipeline.scope();
    auto m = small_resnet();
    m->compile(optimizers::SGD(0.1f), "sparse_categorical_crossentropy");
    m->fit(testing::random_tensor({8, 6, 6, 2}, 5), testing::labelled_rows(8, 1, 3, 1).y,
           {.epochs = 1, .batch_size = 8, .verbose = 0});
    return pipeline.extended().cuts();
  };
  EXPECT_EQ(cut_at({6, 10}), (std::vector<int>{6, 10}));
  EXPECT_NE(testing::error_of([&] { cut_at({4}); })
                .find("the cut before layer 4 (BatchNormalization \"batch_normalization_1\") falls inside a block of "
                      "the graph (the layers from Conv2D \"conv2d_1\" to Add \"add\")"),
            std::string::npos)
      << testing::error_of([&] { cut_at({4}); });
  std::string too_many = testing::error_of([&] { trained("pipeline:11:1", 1); });
  EXPECT_NE(too_many.find("fewer places than the 10 cuts 11 stages need"), std::string::npos) << too_many;
  // A graph's stage is its part: stage 1 of the cut at 6 takes the block's sum.
  Graph part = graph_part(*model->graph(), model->layers(), 6, 13);
  EXPECT_EQ(part.input_shapes, (std::vector<Shape>{{6, 6, 4}}));
  EXPECT_EQ(part.nodes.size(), 7u);
  EXPECT_EQ(part.nodes[0].inputs, (std::vector<int>{-1}));
}

// Model parallelism keeps the graph on every device, its Dense layers split by columns (each output
// gathered), the rest whole; it trains as one device and says which layers it left whole.
TEST(Functional, ModelParallelismSplitsAGraphsDenseLayersAndNamesTheRest) {
  auto one = trained("default");
  auto split = trained("model-parallel:2");
  ASSERT_EQ(split.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i)
    for (size_t j = 0; j < one[i].size(); ++j) EXPECT_NEAR(split[i][j], one[i][j], 2e-5) << i;
  distribute::ModelParallelStrategy strategy(2);
  auto scope = strategy.scope();
  auto m = small_resnet();
  m->compile(optimizers::SGD(0.1f), "sparse_categorical_crossentropy");
  m->fit(testing::random_tensor({8, 6, 6, 2}, 5), testing::labelled_rows(8, 1, 3, 1).y,
         {.epochs = 1, .batch_size = 8, .verbose = 0});
  std::vector<std::pair<std::string, std::string>> plan = strategy.extended().plan();
  ASSERT_EQ(plan.size(), 7u);  // the layers with variables
  EXPECT_EQ(plan[0], (std::pair<std::string, std::string>{"Conv2D \"conv2d\"", "whole"}));
  EXPECT_EQ(plan[1], (std::pair<std::string, std::string>{"BatchNormalization \"batch_normalization\"", "whole"}));
  EXPECT_EQ(plan[5], (std::pair<std::string, std::string>{"Dense \"dense\"", "columns, gathered"}));
  EXPECT_EQ(plan[6], (std::pair<std::string, std::string>{"Dense \"dense_1\"", "columns, gathered"}));
}

}  // namespace
}  // namespace tandem
