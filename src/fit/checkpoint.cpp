// Weights and checkpoints as safetensors. A checkpoint adds to the state (variables, optimizer
// slots and step) the seed, the training position and the epoch's running metrics.
#include <algorithm>

#include "tandem/model.h"

namespace tandem {
namespace {

std::string metric_key(size_t i) { return fmt::format("metric:{}", i); }

}  // namespace

std::vector<std::pair<std::string, Tensor>> Model::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (Variable* v : variables()) out.emplace_back(v->name, v->value);
  if (optimizer_) {
    if (!strategy_->extended().collects_state_together()) optimizer_->build(trainable_variables());
    for (auto& entry : optimizer_->state()) out.push_back(std::move(entry));
  }
  strategy_->extended().collect_state(out);
  return out;
}

void Model::save_weights(const std::string& path) {
  if (!built()) fail("save_weights: model \"{}\" is not built yet (call build() or fit() first)", name_);
  if (path.ends_with(".weights.h5")) {
    io::write_file_atomically(path, keras_weights());
    return;
  }
  io::TensorFile file{state(), {{"format", "tandem"}, {"model", name_}}};
  io::save_safetensors(path, file);
}

io::NamedTensors Model::checked_load(const std::string& path, std::map<std::string, std::string>* metadata) {
  if (!built()) fail("load_weights: model \"{}\" is not built yet (call build() with the input shape first)", name_);
  io::TensorFile file = io::load_safetensors(path);
  restore_state(file.tensors, path);
  if (metadata) *metadata = std::move(file.metadata);
  return std::move(file.tensors);
}

void Model::restore_state(const io::NamedTensors& tensors, const std::string& path) {
  auto find = [&](const std::string& name) -> const Tensor* {
    for (auto& [n, t] : tensors)
      if (n == name) return &t;
    return nullptr;
  };
  for (Variable* v : variables()) {
    const Tensor* t = find(v->name);
    if (!t) fail("load_weights: \"{}\" has no tensor \"{}\"", path, v->name);
    if (!(t->shape() == v->value.shape()) || t->dtype() != DType::Float32)
      fail("load_weights: \"{}\" in \"{}\" is {} {}, the model expects float32 {}", v->name, path,
           dtype_name(t->dtype()), t->shape().str(), v->value.shape().str());
  }
  for (Variable* v : variables()) v->value.copy_from(*find(v->name));
  replicas_.reset();  // remade from the loaded weights when next needed
  if (optimizer_ && find("optimizer/iterations")) optimizer_->load_state(tensors, trainable_variables());
}

void Model::save_checkpoint(const std::string& path) {
  if (!built()) fail("save_checkpoint: model \"{}\" is not built yet", name_);
  io::TensorFile file{state(),
                      {{"format", "tandem"},
                       {"model", name_},
                       {"seed", std::to_string(seed_)},
                       {"epoch", std::to_string(position_.epoch)},
                       {"step", std::to_string(position_.step)},
                       {"training_calls", std::to_string(training_calls_)}}};
  for (const auto& [key, value] : run_signature_) file.metadata["run." + key] = value;
  for (size_t i = 0; i < running_metrics_.size(); ++i) {
    auto [total, count] = running_metrics_[i].accumulators();
    file.metadata[metric_key(i)] = fmt::format("{:a} {}", total, count);  // hex float: exact
  }
  io::save_safetensors(path, file);
}

TrainingPosition Model::load_checkpoint(const std::string& path) {
  std::map<std::string, std::string> meta;
  checked_load(path, &meta);
  auto number = [&](const char* key) -> uint64_t {
    auto it = meta.find(key);
    if (it == meta.end())
      fail("load_checkpoint: \"{}\" has no \"{}\" in its metadata (a weights file, not a checkpoint?)", path, key);
    try {
      return std::stoull(it->second);
    } catch (const std::exception&) {
      fail("load_checkpoint: \"{}\": metadata \"{}\" is \"{}\", expected a number", path, key, it->second);
    }
  };
  seed_ = number("seed");
  training_calls_ = number("training_calls");
  position_ = TrainingPosition{static_cast<int>(number("epoch")), static_cast<int64_t>(number("step"))};
  restored_metrics_.clear();
  for (size_t i = 0; meta.count(metric_key(i)); ++i) {
    double total = 0;
    long long count = 0;
    if (std::sscanf(meta[metric_key(i)].c_str(), "%la %lld", &total, &count) != 2)
      fail("load_checkpoint: \"{}\": metadata \"{}\" is malformed", path, metric_key(i));
    restored_metrics_.emplace_back(total, count);
  }
  return position_;
}

void Model::restore_running_metrics() {
  for (size_t i = 0; i < running_metrics_.size() && i < restored_metrics_.size(); ++i)
    running_metrics_[i].restore(restored_metrics_[i]);
}

}  // namespace tandem
