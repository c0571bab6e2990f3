// The tutorial's question, "how long does it take to reach a satisfying performance?", as a
// callback (tandem fit --target-accuracy, tandem compare): the test accuracy after every epoch
// (shown in the epoch's logs), the best one, and the training time until the target was first
// reached, the evaluations' own time left out.
#include "cli/common.h"

namespace tandem::cli {

TargetAccuracy::TargetAccuracy(Tensor x, Tensor y, double target, int64_t batch_size)
    : x_(std::move(x)), y_(std::move(y)), target_(target), batch_size_(batch_size) {}

void TargetAccuracy::on_train_begin(const Logs&) {
  start_ = Clock::now();
  evaluating_ = Clock::duration::zero();
}

void TargetAccuracy::on_epoch_logs(int epoch, Logs& logs) {
  auto before = Clock::now();
  Logs test = model->evaluate(x_, y_, {.batch_size = batch_size_});
  double accuracy = log_value(test, "accuracy");
  if (!reached_ && accuracy >= target_) {
    reached_ = true;
    seconds_ = std::chrono::duration<double>(before - start_ - evaluating_).count();
    epoch_ = epoch + 1;
  }
  evaluating_ += Clock::now() - before;
  best_ = std::max(best_, accuracy);
  logs.emplace_back("test_accuracy", accuracy);
}

}  // namespace tandem::cli
