// Sequential: layer stacking, building, the forward pass (on the running replica's variables
// inside Strategy::run), variables and summary().
#include <algorithm>

#include "tandem/model.h"

namespace tandem {

Sequential::Sequential(SequentialOptions options)
    : name_(std::move(options.name)), seed_(options.seed), strategy_(distribute::current_strategy()) {
  if (strategy_ == nullptr) {
    own_strategy_ = std::make_unique<distribute::DefaultStrategy>();
    strategy_ = own_strategy_.get();
  }
}

void Sequential::add(std::shared_ptr<layers::Layer> layer) {
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

void Sequential::build(const Shape& input_shape) {
  if (layers_.empty()) fail("Sequential \"{}\": has no layers to build", name_);
  Shape shape = input_shape;
  for (size_t i = 0; i < layers_.size(); ++i) shape = layers_[i]->build(shape, mix_seed(seed_, i));
}

bool Sequential::built() const { return !layers_.empty() && layers_.back()->built(); }

Tensor Sequential::call(const Tensor& x, const CallContext& ctx) {
  if (layers_.empty()) fail("Sequential \"{}\": has no layers", name_);
  if (!x.defined()) fail("Sequential \"{}\": input is undefined", name_);
  if (!built()) {
    if (x.rank() < 2) fail("Sequential \"{}\": input needs a batch axis, got shape {}", name_, x.shape().str());
    build(Shape(std::span<const int64_t>(x.shape().begin() + 1, x.shape().end())));
  }
  return layers::call_layers(layers_, x, ctx);
}

std::shared_ptr<distribute::ModelReplicas> Sequential::make_replicas() {
  replicas_ = std::make_shared<distribute::ModelReplicas>(strategy_->extended(), layers_);
  strategy_->extended().forget_replica_optimizers();
  return replicas_;
}

distribute::ModelReplicas::Replica* Sequential::running_replica(const Tensor* first_input) {
  const distribute::ReplicaContext* context = distribute::replica_context();
  if (context == nullptr || context->num_replicas_in_sync() == 1) return nullptr;
  if (context->strategy != strategy_)
    fail(
        "Sequential \"{}\": used inside {}.run but made outside its scope; make the model inside "
        "`auto scope = strategy.scope();` so that its variables are distributed",
        name_, context->strategy->name());
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

Tensor Sequential::operator()(const Tensor& x, bool training) {
  distribute::ModelReplicas::Replica* rep = running_replica(&x);
  std::vector<Tensor>& activity = rep != nullptr ? rep->activity_losses : activity_losses_;
  activity.clear();  // as Keras: a call's activity losses replace the last call's
  if (rep == nullptr) {
    CallContext ctx{training, {seed_, training ? training_calls_++ : 0, 0}};
    ctx.penalties = &activity;
    return call(x, ctx);
  }
  if (!x.defined()) fail("Sequential \"{}\": input is undefined", name_);
  // Replicas see consecutive slices of the global batch: each sample gets the dropout mask it
  // would get on one device (from the slice's first row when run was given a split batch, else
  // assuming even splits).
  const distribute::ReplicaContext* context = distribute::replica_context();
  int64_t offset = context->first_row >= 0 ? context->first_row : x.dim(0) * context->replica_id;
  CallContext ctx{training, {seed_, training ? rep->training_calls++ : 0, offset}};
  ctx.penalties = &activity;
  return layers::call_layers(rep->layers, x, ctx);
}

std::vector<Variable*> Sequential::variables() {
  if (distribute::ModelReplicas::Replica* rep = running_replica(nullptr)) return rep->variables;
  std::vector<Variable*> out;
  for (auto& l : layers_)
    for (auto& v : l->variables()) out.push_back(&v);
  return out;
}

std::vector<Tensor> Sequential::losses() {
  std::vector<Tensor> out;
  for (Variable* v : trainable_variables())
    if (v->regularizer.any()) out.push_back(ops::penalty(v->value, v->regularizer));
  distribute::ModelReplicas::Replica* rep = running_replica(nullptr);
  for (const Tensor& rows : rep != nullptr ? rep->activity_losses : activity_losses_)
    out.push_back(ops::mean(rows));  // Keras divides an activity penalty by the batch's rows
  return out;
}

double Sequential::weight_penalty() {
  StopRecording no_tape;
  Tensor total = ops::penalties(trainable_variables());
  return total.defined() ? static_cast<double>(total.item()) : 0.0;
}

std::vector<Variable*> Sequential::replica_variables(int replica) {
  if (replica == 0) return variables();
  if (!replicas_ || replica < 0 || replica >= replicas_->size())
    fail("replica_variables: replica {} does not exist ({} replicas made)", replica, replicas_ ? replicas_->size() : 0);
  return (*replicas_)[replica].variables;
}

std::vector<Variable*> Sequential::trainable_variables() {
  std::vector<Variable*> out;
  for (Variable* v : variables())
    if (v->trainable) out.push_back(v);
  return out;
}

void Sequential::set_trainable(bool trainable) {
  for (auto& layer : layers_) layer->set_trainable(trainable);
}

int64_t Sequential::count_params() const {
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

std::string Sequential::summary() const {
  const int w1 = 29, w2 = 26, w3 = 10;
  std::string rule(w1 + w2 + w3, '_'), double_rule(w1 + w2 + w3, '=');
  std::string s = fmt::format("Model: \"{}\"\n{}\n", name_, rule);
  s += fmt::format(" {:<{}}{:<{}}{:<{}}\n{}\n", "Layer (type)", w1 - 1, "Output Shape", w2, "Param #", w3, double_rule);
  int64_t total = 0, trainable = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    std::string shape = "?";
    if (l->built()) shape = l->output_shape().str_with_batch();
    s += fmt::format(" {:<{}}{:<{}}{:<{}}\n", fmt::format("{} ({})", l->name(), l->type()), w1 - 1, shape, w2,
                     l->count_params(), w3);
    s += i + 1 < layers_.size() ? fmt::format("{:<{}}\n", "", w1 + w2 + w3) : "";
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
