#include "tandem/metrics.h"

#include "tandem/autograd.h"
#include "tandem/ops.h"

namespace tandem {
namespace {

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (row[j] > row[best]) best = j;
  return best;
}

}  // namespace

Metric Metric::parse(const std::string& name, const Loss& loss) {
  if (name == "accuracy" || name == "acc") {
    switch (loss.kind()) {
      case Loss::Kind::SparseCategoricalCrossentropy: return {Kind::SparseCategoricalAccuracy, name};
      case Loss::Kind::CategoricalCrossentropy: return {Kind::CategoricalAccuracy, name};
      default: return {Kind::BinaryAccuracy, name};
    }
  }
  if (name == "sparse_categorical_accuracy") return {Kind::SparseCategoricalAccuracy, name};
  if (name == "categorical_accuracy") return {Kind::CategoricalAccuracy, name};
  if (name == "binary_accuracy") return {Kind::BinaryAccuracy, name};
  fail(
      "metrics: unknown metric \"{}\"; expected one of: accuracy, sparse_categorical_accuracy, "
      "categorical_accuracy, binary_accuracy",
      name);
}

Metric Metric::on_output(const std::string& name, const Loss& loss, size_t i) {
  const LossOutput& o = loss.parts()->at(i);
  Metric m = parse(name, o.loss);
  m.name_ = o.name + "_" + name;
  m.outputs_ = std::make_shared<const Loss>(loss);
  m.output_ = i;
  return m;
}

Metric Metric::output_loss(const Loss& loss, size_t i) {
  Metric m(Kind::OutputLoss, loss.parts()->at(i).name + "_loss");
  m.outputs_ = std::make_shared<const Loss>(loss);
  m.output_ = i;
  return m;
}

std::vector<Metric> Metric::reported(const std::vector<std::string>& names, const Loss& loss) {
  std::vector<Metric> out;
  out.emplace_back(Kind::Mean, "loss");
  if (loss.parts() == nullptr) {
    for (const std::string& n : names) out.push_back(parse(n, loss));
    return out;
  }
  for (size_t i = 0; i < loss.parts()->size(); ++i) out.push_back(output_loss(loss, i));
  for (const std::string& n : names)
    for (size_t i = 0; i < loss.parts()->size(); ++i) out.push_back(on_output(n, loss, i));
  return out;
}

void Metric::update(const Tensor& y_true_on_device, const Tensor& y_pred_on_device) {
  if (outputs_) {  // this output's columns
    Tensor y = outputs_->output_targets(y_true_on_device, output_),
           p = outputs_->output_predictions(y_pred_on_device, output_);
    if (kind_ == Kind::OutputLoss) {
      if (p.dim(0) == 0) return;
      StopRecording constant;
      update_mean(ops::mean(outputs_->parts()->at(output_).loss.per_sample(y, p)).item(), p.dim(0));
      return;
    }
    Metric whole = *this;
    whole.outputs_.reset();
    whole.update(y, p);
    total_ = whole.total_;
    count_ = whole.count_;
    return;
  }
  // Metrics are counted on the host: a device's tensors come over through the copy path.
  Tensor y_true_in = y_true_on_device.to(Device::cpu()), y_pred = y_pred_on_device.to(Device::cpu()).contiguous();
  int64_t rows = y_pred.dim(0);
  int64_t cols = rows == 0 ? 0 : y_pred.numel() / rows;
  const float* p = y_pred.data<float>();
  int64_t correct = 0;
  switch (kind_) {
    case Kind::SparseCategoricalAccuracy: {
      if (y_true_in.numel() != rows) fail("{}: {} labels for {} predictions", name_, y_true_in.numel(), rows);
      if (y_true_in.dtype() == DType::Int32) {
        const int32_t* l = y_true_in.contiguous().data<int32_t>();
        for (int64_t i = 0; i < rows; ++i) correct += argmax(p + i * cols, cols) == l[i];
      } else {
        Tensor t = ops::class_labels(y_true_in, name_);
        for (int64_t i = 0; i < rows; ++i) correct += argmax(p + i * cols, cols) == t.data<int32_t>()[i];
      }
      break;
    }
    case Kind::CategoricalAccuracy: {
      Tensor t = y_true_in.contiguous();
      for (int64_t i = 0; i < rows; ++i)
        correct += argmax(p + i * cols, cols) == argmax(t.data<float>() + i * cols, cols);
      break;
    }
    case Kind::BinaryAccuracy: {
      Tensor t = y_true_in.contiguous();
      const float* tt = t.data<float>();
      int64_t hits = 0;
      for (int64_t k = 0; k < rows * cols; ++k) hits += (p[k] > 0.5f) == (tt[k] > 0.5f);
      total_ += static_cast<double>(hits) / static_cast<double>(std::max<int64_t>(cols, 1));
      count_ += rows;
      return;
    }
    case Kind::Mean:
    case Kind::OutputLoss: fail("{}: a mean metric takes update_mean", name_);
  }
  total_ += static_cast<double>(correct);
  count_ += rows;
}

void Metric::update_mean(double value, int64_t weight) {
  total_ += value * static_cast<double>(weight);
  count_ += weight;
}

}  // namespace tandem
