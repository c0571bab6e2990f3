#pragma once
// Streaming metrics: update per batch, read the running result, reset per epoch.
#include <memory>
#include <string>
#include <vector>

#include "tandem/losses.h"
#include "tandem/tensor.h"

namespace tandem {

class Metric {
 public:
  enum class Kind { SparseCategoricalAccuracy, CategoricalAccuracy, BinaryAccuracy, Mean, OutputLoss };
  Metric(Kind kind, std::string name) : kind_(kind), name_(std::move(name)) {}
  // "accuracy" resolves against the loss as Keras does (sparse, categorical or binary).
  static Metric parse(const std::string& name, const Loss& loss);
  // On output i of a model of several outputs (`loss`: its loss list, bound): metric `name` on the
  // output's columns, reported as "<output>_<name>"; output_loss: the output's own loss (not
  // weighted), "<output>_loss", as Keras reports them.
  static Metric on_output(const std::string& name, const Loss& loss, size_t i);
  static Metric output_loss(const Loss& loss, size_t i);
  // The metrics fit and evaluate report: the loss, then for a loss list each output's loss, then
  // each name (for a loss list, on every output).
  static std::vector<Metric> reported(const std::vector<std::string>& names, const Loss& loss);

  void update(const Tensor& y_true, const Tensor& y_pred);  // accuracy kinds
  void update_mean(double value, int64_t weight);           // Kind::Mean
  double result() const { return count_ == 0 ? 0.0 : total_ / static_cast<double>(count_); }
  void reset() {
    total_ = 0.0;
    count_ = 0;
  }
  const std::string& name() const { return name_; }
  // The accumulators, for checkpoints.
  std::pair<double, int64_t> accumulators() const { return {total_, count_}; }
  void restore(std::pair<double, int64_t> a) {
    total_ = a.first;
    count_ = a.second;
  }

 private:
  Kind kind_;
  std::string name_;
  std::shared_ptr<const Loss> outputs_;  // on one output of these (null: the whole prediction)
  size_t output_ = 0;
  double total_ = 0.0;
  int64_t count_ = 0;
};

}  // namespace tandem
