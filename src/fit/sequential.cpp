// Model: a Sequential's layer stacking and a Functional's graph, building, the forward pass (on the
// running replica's variables inside Strategy::run), variables and summary().
#include <algorithm>

#include "tandem/model.h"

namespace tandem {

Model::Model(ModelOptions options)
    : name_(std::move(options.name)), seed_(options.seed), strategy_(distribute::current_strategy()) {
  if (strategy_ == nullptr) {
    own_strategy_ = std::make_unique<distribute::DefaultStrategy>();
    strategy_ = own_strategy_.get();
  }
}

Model::Model(std::span<const layers::SymbolicTensor> inputs, std::span<const layers::SymbolicTensor> outputs,
             ModelOptions options)
    : Model(std::move(options)) {
  layers::Traced traced = layers::trace(inputs, outputs, name_);
  layers_ = std::move(traced.layers);
  input_shapes_ = traced.graph.input_shapes;
  input_names_ = std::move(traced.input_names);
  auto graph = std::make_shared<layers::Graph>(std::move(traced.graph));
  // Each layer built at its first node, in the graph's order, with the model's seed (as a
  // Sequential builds its layer i with mix_seed(seed, i)).
  std::vector<Shape> shapes(graph->nodes.size());
  for (size_t i = 0; i < graph->nodes.size(); ++i) {
    const layers::Graph::Node& node = graph->nodes[i];
    std::vector<Shape> in;
    for (int from : node.inputs)
      in.push_back(from >= 0 ? shapes[static_cast<size_t>(from)] : input_shapes_[static_cast<size_t>(-1 - from)]);
    layers::Layer& layer = *layers_[node.layer];
    uint64_t seed = mix_seed(seed_, node.layer);
    auto* merge = dynamic_cast<layers::Merge*>(&layer);
    shapes[i] = merge != nullptr ? merge->build_inputs(in, seed) : layer.build(in[0], seed);
  }
  // Its outputs: each named by the layer that makes it (an input given as an output, by its name).
  for (int out : graph->outputs) {
    auto i = static_cast<size_t>(out >= 0 ? out : -1 - out);
    output_shapes_.push_back(out >= 0 ? shapes[i] : input_shapes_[i]);
    std::string name = out >= 0 ? layers_[graph->nodes[i].layer]->name() : input_names_[i];
    if (std::find(output_names_.begin(), output_names_.end(), name) != output_names_.end())
      fail("Functional \"{}\": two outputs come from \"{}\"; give each output a layer of its own", name_, name);
    output_names_.push_back(std::move(name));
  }
  graph_ = std::move(graph);
}

Sequential::Sequential(ModelOptions options)
    : Model({options.name.empty() ? "sequential" : std::move(options.name), options.seed}) {}

Functional::Functional(const layers::SymbolicTensor& input, const layers::SymbolicTensor& output, ModelOptions options)
    : Functional(std::vector{input}, std::vector{output}, std::move(options)) {}

Functional::Functional(const std::vector<layers::SymbolicTensor>& inputs,
                       const std::vector<layers::SymbolicTensor>& outputs, ModelOptions options)
    : Model(inputs, outputs, {options.name.empty() ? "functional" : std::move(options.name), options.seed}) {}

void Model::add(std::shared_ptr<layers::Layer> layer) {
  if (graph_)
    fail(
        "Functional \"{}\": add() builds a Sequential; a functional model's layers are those between its inputs "
        "and outputs",
        name_);
  if (!layer) fail("Sequential \"{}\": add() got a null layer", name_);
  if (layer->name().empty()) {
    std::string base = layer->default_name();
    int same = static_cast<int>(
        std::count_if(layers_.begin(), layers_.end(), [&](const auto& l) { return l->default_name() == base; }));
    layer->set_name(same == 0 ? base : fmt::format("{}_{}", base, same));
  }
  for (const auto& l : layers_)
    if (l->name() == layer->name()) fail("Sequential \"{}\": a layer named \"{}\" already exists", name_, l->name());
  if (!layers_.empty() && layer->declared_input_shape())
    fail("Sequential \"{}\": {} declares input_shape but is not the first layer", name_, layer->label());
  layers_.push_back(std::move(layer));
  // Keras builds as soon as the input shape is known.
  if (layers_.size() == 1 && layers_[0]->declared_input_shape()) build(*layers_[0]->declared_input_shape());
  else if (layers_.size() > 1 && layers_[layers_.size() - 2]->built())
    layers_.back()->build(layers_[layers_.size() - 2]->output_shape(), mix_seed(seed_, layers_.size() - 1));
}

void Model::build(const Shape& input_shape) {
  if (graph_) {  // built when made
    if (!(input_shape == *declared_input_shape()))
      fail("Functional \"{}\": its input is of shape {}, asked to build for {}", name_,
           declared_input_shape()->str_with_batch(), input_shape.str_with_batch());
    return;
  }
  if (layers_.empty()) fail("Sequential \"{}\": has no layers to build", name_);
  Shape shape = input_shape;
  for (size_t i = 0; i < layers_.size(); ++i) shape = layers_[i]->build(shape, mix_seed(seed_, i));
}

std::optional<Shape> Model::declared_input_shape() const {
  if (graph_) return input_shapes_.size() == 1 ? input_shapes_[0] : Shape{graph_->packed_width()};
  if (layers_.empty()) return std::nullopt;
  return layers_.front()->declared_input_shape();
}

Shape Model::input_shape() const {
  if (!built()) fail("{} \"{}\": not built yet, so its input shape is unknown", kind(), name_);
  return graph_ ? *declared_input_shape() : layers_.front()->input_shape();
}

Shape Model::output_shape() const {
  if (!built()) fail("{} \"{}\": not built yet, so its output shape is unknown", kind(), name_);
  if (!graph_) return layers_.back()->output_shape();
  if (output_shapes_.size() == 1) return output_shapes_[0];
  int64_t width = 0;  // several: packed side by side
  for (const Shape& s : output_shapes_) width += s.numel();
  return Shape{width};
}

bool Model::built() const { return graph_ != nullptr || (!layers_.empty() && layers_.back()->built()); }

Tensor Model::call(const Tensor& x, const CallContext& ctx) {
  if (layers_.empty()) fail("Sequential \"{}\": has no layers", name_);
  if (!x.defined()) fail("{} \"{}\": input is undefined", kind(), name_);
  if (!built()) {
    if (x.rank() < 2) fail("Sequential \"{}\": input needs a batch axis, got shape {}", name_, x.shape().str());
    build(Shape(std::span<const int64_t>(x.shape().begin() + 1, x.shape().end())));
  }
  return layers::call_network(network(), x, ctx);
}

std::shared_ptr<distribute::ModelReplicas> Model::make_replicas() {
  replicas_ = std::make_shared<distribute::ModelReplicas>(strategy_->extended(), layers_, graph_);
  strategy_->extended().forget_replica_optimizers();
  return replicas_;
}

distribute::ModelReplicas::Replica* Model::running_replica(const Tensor* first_input) {
  const distribute::ReplicaContext* context = distribute::replica_context();
  if (context == nullptr || context->num_replicas_in_sync() == 1) return nullptr;
  if (context->strategy != strategy_)
    fail(
        "{} \"{}\": used inside {}.run but made outside its scope; make the model inside "
        "`auto scope = strategy.scope();` so that its variables are distributed",
        kind(), name_, context->strategy->name());
  std::lock_guard lock(replicas_mutex_);
  if (!built()) {
    if (first_input == nullptr)
      fail("Sequential \"{}\": not built yet; call it on a batch (or build()) before asking for its variables", name_);
    if (first_input->rank() < 2)
      fail("Sequential \"{}\": input needs a batch axis, got shape {}", name_, first_input->shape().str());
    build(Shape(std::span<const int64_t>(first_input->shape().begin() + 1, first_input->shape().end())));
  }
  if (!replicas_ || replicas_->size() != context->num_local_replicas) make_replicas();
  return &(*replicas_)[context->local_replica_id];
}

Tensor Model::operator()(const Tensor& x, bool training) {
  distribute::ModelReplicas::Replica* rep = running_replica(&x);
  std::vector<Tensor>& activity = rep != nullptr ? rep->activity_losses : activity_losses_;
  activity.clear();  // as Keras: a call's activity losses replace the last call's
  if (rep == nullptr) {
    CallContext ctx{training, {seed_, training ? training_calls_++ : 0, 0}};
    ctx.penalties = &activity;
    return call(x, ctx);
  }
  if (!x.defined()) fail("{} \"{}\": input is undefined", kind(), name_);
  // Replicas see consecutive slices of the global batch: each sample gets the dropout mask it
  // would get on one device (from the slice's first row when run was given a split batch, else
  // assuming even splits).
  const distribute::ReplicaContext* context = distribute::replica_context();
  int64_t offset = context->first_row >= 0 ? context->first_row : x.dim(0) * context->replica_id;
  CallContext ctx{training, {seed_, training ? rep->training_calls++ : 0, offset}};
  ctx.penalties = &activity;
  return layers::call_network(rep->network(), x, ctx);
}

std::vector<Variable*> Model::variables() {
  if (distribute::ModelReplicas::Replica* rep = running_replica(nullptr)) return rep->variables;
  std::vector<Variable*> out;
  for (auto& l : layers_)
    for (auto& v : l->variables()) out.push_back(&v);
  return out;
}

std::vector<Tensor> Model::losses() {
  std::vector<Tensor> out;
  for (Variable* v : trainable_variables())
    if (v->regularizer.any()) out.push_back(ops::penalty(v->value, v->regularizer));
  distribute::ModelReplicas::Replica* rep = running_replica(nullptr);
  for (const Tensor& rows : rep != nullptr ? rep->activity_losses : activity_losses_)
    out.push_back(ops::mean(rows));  // Keras divides an activity penalty by the batch's rows
  return out;
}

double Model::weight_penalty() {
  StopRecording no_tape;
  Tensor total = ops::penalties(trainable_variables());
  return total.defined() ? static_cast<double>(total.item()) : 0.0;
}

std::vector<Variable*> Model::replica_variables(int replica) {
  if (replica == 0) return variables();
  if (!replicas_ || replica < 0 || replica >= replicas_->size())
    fail("replica_variables: replica {} does not exist ({} replicas made)", replica, replicas_ ? replicas_->size() : 0);
  return (*replicas_)[replica].variables;
}

std::vector<Variable*> Model::trainable_variables() {
  std::vector<Variable*> out;
  for (Variable* v : variables())
    if (v->trainable) out.push_back(v);
  return out;
}

void Model::set_trainable(bool trainable) {
  for (auto& layer : layers_) layer->set_trainable(trainable);
}

int64_t Model::count_params() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l->count_params();
  return n;
}

namespace {
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
}  // namespace

std::string Model::summary() const {
  // A Functional's table has Keras' fourth column: what each layer's calls read, as
  // "layer[call][0]" (an input: "input_layer[0][0]").
  const int w1 = 29, w2 = 26, w3 = 10, w4 = graph_ ? 24 : 0;
  const int width = w1 + w2 + w3 + w4;
  std::vector<std::vector<std::string>> connected(layers_.size());
  std::vector<std::string> node_names;  // each node's output as "layer[call][0]"
  if (graph_) {
    std::vector<int> calls(layers_.size(), 0);
    for (const auto& node : graph_->nodes) {
      for (int from : node.inputs)
        connected[node.layer].push_back(from >= 0 ? node_names[static_cast<size_t>(from)]
                                                  : input_names_[static_cast<size_t>(-1 - from)] + "[0][0]");
      node_names.push_back(fmt::format("{}[{}][0]", layers_[node.layer]->name(), calls[node.layer]++));
    }
  }
  std::string rule(static_cast<size_t>(width), '_'), double_rule(static_cast<size_t>(width), '=');
  std::string s = fmt::format("Model: \"{}\"\n{}\n", name_, rule);
  s += fmt::format(" {:<{}}{:<{}}{:<{}}{}\n{}\n", "Layer (type)", w1 - 1, "Output Shape", w2, "Param #", w3,
                   graph_ ? "Connected to" : "", double_rule);
  auto row = [&](const std::string& name, const std::string& shape, int64_t params,
                 const std::vector<std::string>& in) {
    s += fmt::format(" {:<{}}{:<{}}{:<{}}{}\n", name, w1 - 1, shape, w2, params, w3, in.empty() ? "" : in[0]);
    for (size_t k = 1; k < in.size(); ++k) s += fmt::format("{:<{}}{}\n", "", w1 + w2 + w3, in[k]);
  };
  for (size_t k = 0; k < input_shapes_.size(); ++k) {
    row(fmt::format("{} (InputLayer)", input_names_[k]), input_shapes_[k].str_with_batch(), 0, {});
    s += fmt::format("{:<{}}\n", "", width);
  }
  int64_t total = 0, trainable = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    std::string shape = "?";
    if (l->built()) shape = l->output_shape().str_with_batch();
    row(fmt::format("{} ({})", l->name(), l->type()), shape, l->count_params(), connected[i]);
    s += i + 1 < layers_.size() ? fmt::format("{:<{}}\n", "", width) : "";
    for (const auto& v : l->variables()) {
      total += v.value.numel();
      if (v.trainable) trainable += v.value.numel();
    }
  }
  s += fmt::format("{}\nTotal params: {}\nTrainable params: {}\nNon-trainable params: {}\n{}\n", double_rule,
                   with_commas(total), with_commas(trainable), with_commas(total - trainable), rule);
  return s;
}

}  // namespace tandem
