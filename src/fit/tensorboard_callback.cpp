#include "tandem/model.h"

namespace tandem {

TensorBoard::TensorBoard(std::string log_dir, TensorBoardOptions options)
    : log_dir_(std::move(log_dir)), options_(options) {
  if (log_dir_.empty()) fail("TensorBoard: log_dir is empty");
  if (options_.update_freq < 0)
    fail("TensorBoard: update_freq must be 0 (per epoch) or positive, got {}", options_.update_freq);
}

TensorBoard::~TensorBoard() = default;

void TensorBoard::on_train_begin(const Logs&) {
  if (!writes_files()) return;  // the chief logs for every worker
  train_ = std::make_unique<io::EventWriter>(log_dir_ + "/train");
  validation_.reset();  // made at the first validation value: no empty file for a run without validation
  global_step_ = model->optimizer().iterations();
}

void TensorBoard::on_batch_end(int64_t, const Logs& logs) {
  ++global_step_;
  if (train_ && options_.update_freq > 0 && global_step_ % options_.update_freq == 0)
    for (const auto& [name, value] : logs) train_->add_scalar("batch_" + name, static_cast<float>(value), global_step_);
}

void TensorBoard::on_epoch_end(int epoch, const Logs& logs) {
  if (!train_) return;
  for (const auto& [name, value] : logs) {
    if (name == "lr") train_->add_scalar("epoch_learning_rate", static_cast<float>(value), epoch);
    else if (name.starts_with("val_")) {
      if (!validation_) validation_ = std::make_unique<io::EventWriter>(log_dir_ + "/validation");
      validation_->add_scalar("epoch_" + name.substr(4), static_cast<float>(value), epoch);
    } else train_->add_scalar("epoch_" + name, static_cast<float>(value), epoch);
  }
  train_->flush();
  if (validation_) validation_->flush();
}

void TensorBoard::on_train_end(const Logs&) {
  train_.reset();
  validation_.reset();
}

}  // namespace tandem
