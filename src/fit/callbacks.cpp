// History, logs, and the callbacks that need no files of their own format.
#include "tandem/callbacks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "tandem/error.h"
#include "tandem/model.h"

namespace tandem {

double log_value(const Logs& logs, const std::string& name) {
  for (const auto& [n, v] : logs)
    if (n == name) return v;
  std::string have;
  for (const auto& [n, v] : logs) have += (have.empty() ? "" : ", ") + n;
  fail("logs: no value named \"{}\"; have: {}", name, have);
}

bool Callback::writes_files() const { return model == nullptr || model->strategy()->extended().is_chief(); }

bool Callback::takes_part_only() const {
  if (writes_files()) return false;
  if (model->strategy()->extended().collects_state_together()) model->state();
  return true;
}

const std::vector<double>& History::operator[](const std::string& name) const {
  auto it = history.find(name);
  if (it == history.end()) {
    std::string have;
    for (const auto& [n, v] : history) have += (have.empty() ? "" : ", ") + n;
    fail("History: no series named \"{}\"; have: {}", name, have);
  }
  return it->second;
}

}  // namespace tandem

namespace tandem {

Monitor::Monitor(std::string name, MonitorMode mode, double min_delta)
    : name_(std::move(name)), min_delta_(std::fabs(min_delta)) {
  bool accuracy_like = name_.find("acc") != std::string::npos || name_.find("auc") != std::string::npos;
  maximize_ = mode == MonitorMode::Max || (mode == MonitorMode::Auto && accuracy_like);
  reset();
}

void Monitor::reset() {
  best_ = maximize_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

std::optional<bool> Monitor::improved(const Logs& logs, const char* who) {
  for (const auto& [n, value] : logs) {
    if (n != name_) continue;
    bool better = maximize_ ? value > best_ + min_delta_ : value < best_ - min_delta_;
    if (better) best_ = value;
    return better;
  }
  if (!warned_) {
    std::string have;
    for (const auto& [n, v] : logs) have += (have.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "warning: %s monitors \"%s\", which is not logged (available: %s)\n", who, name_.c_str(),
                 have.c_str());
    warned_ = true;
  }
  return std::nullopt;
}

CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), separator_(separator), append_(append) {}

void CSVLogger::on_train_begin(const Logs&) {
  columns_.clear();
  if (!append_ && writes_files()) {
    std::ofstream out(filename_, std::ios::trunc);
    if (!out) fail("CSVLogger: cannot write \"{}\"", filename_);
  }
}

void CSVLogger::on_epoch_end(int epoch, const Logs& logs) {
  if (!writes_files()) return;
  bool header = columns_.empty();
  if (header)
    for (const auto& [n, v] : logs) columns_.push_back(n);
  std::ifstream probe(filename_);
  bool empty = !probe || probe.peek() == std::ifstream::traits_type::eof();
  std::ofstream out(filename_, std::ios::app);
  if (!out) fail("CSVLogger: cannot write \"{}\"", filename_);
  if (empty) {
    out << "epoch";
    for (const auto& c : columns_) out << separator_ << c;
    out << '\n';
  }
  out << epoch;
  for (const auto& c : columns_) {
    auto it = std::find_if(logs.begin(), logs.end(), [&](const auto& e) { return e.first == c; });
    out << separator_;
    if (it != logs.end()) out << fmt::format("{}", it->second);
  }
  out << '\n';
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(std::move(options)), monitor_(options_.monitor, options_.mode, options_.min_delta) {
  if (options_.patience < 0) fail("EarlyStopping: patience must be non-negative, got {}", options_.patience);
}

void EarlyStopping::on_train_begin(const Logs&) {
  wait_ = 0;
  stopped_epoch_ = -1;
  monitor_.reset();
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  auto better = monitor_.improved(logs, "EarlyStopping");
  if (!better) return;
  if (*better) {
    wait_ = 0;
    if (options_.restore_best_weights) {
      best_weights_.clear();
      for (Variable* v : model->variables()) best_weights_.push_back(v->value.to_vector());
    }
    return;
  }
  // Keras: stop once `patience` epochs in a row brought no improvement.
  if (++wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    model->stop_training = true;
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  if (stopped_epoch_ >= 0) std::printf("Epoch %d: early stopping\n", stopped_epoch_ + 1);
  if (stopped_epoch_ >= 0 && options_.restore_best_weights && !best_weights_.empty()) {
    auto vars = model->variables();
    for (size_t i = 0; i < vars.size(); ++i)
      vars[i]->value.copy_from(Tensor::from_vector(vars[i]->value.shape(), best_weights_[i]));
  }
}

void TerminateOnNaN::on_train_begin(const Logs&) { terminated_ = false; }

void TerminateOnNaN::on_batch_end(int64_t batch, const Logs& logs) {
  double loss = log_value(logs, "loss");
  if (std::isfinite(loss) || terminated_) return;
  terminated_ = true;
  batch_ = batch;
  loss_ = loss;
  std::printf("\nTerminateOnNaN: the loss is not finite at %s: training stops\n", where().c_str());
  model->stop_training = true;
}

std::string TerminateOnNaN::where() const {
  return fmt::format("epoch {}, batch {} (loss {})", epoch_ + 1, batch_ + 1, loss_);
}

void LearningRateScheduler::on_epoch_begin(int epoch, const Logs&) {
  Optimizer& opt = model->optimizer();
  float lr = schedule_(epoch, opt.current_learning_rate());
  if (!(lr > 0.0f) || !std::isfinite(lr)) fail("LearningRateScheduler: schedule returned {} for epoch {}", lr, epoch);
  opt.set_learning_rate(lr);
}

ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions options)
    : options_(std::move(options)), monitor_(options_.monitor, options_.mode, options_.min_delta) {
  if (!(options_.factor > 0.0 && options_.factor < 1.0))
    fail("ReduceLROnPlateau: factor must be in (0, 1), got {}", options_.factor);
}

void ReduceLROnPlateau::on_epoch_end(int epoch, const Logs& logs) {
  auto better = monitor_.improved(logs, "ReduceLROnPlateau");
  if (!better) return;
  if (cooldown_left_ > 0) --cooldown_left_;
  if (*better) {
    wait_ = 0;
    return;
  }
  if (cooldown_left_ > 0) return;
  if (++wait_ >= options_.patience) {
    Optimizer& opt = model->optimizer();
    double old_lr = opt.current_learning_rate();
    double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
    if (new_lr < old_lr && new_lr > 0.0) {
      opt.set_learning_rate(static_cast<float>(new_lr));
      std::printf("Epoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", epoch + 1, new_lr);
    }
    cooldown_left_ = options_.cooldown;
    wait_ = 0;
  }
}

}  // namespace tandem
