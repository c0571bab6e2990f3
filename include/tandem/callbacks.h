#pragma once
// The callback interface of fit(), and the History it returns.
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class Sequential;

// Named values at a point of training: loss, metrics, val_ ones at epoch end, lr.
using Logs = std::vector<std::pair<std::string, double>>;
double log_value(const Logs& logs, const std::string& name);  // throws when absent

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(const Logs&) {}
  virtual void on_train_end(const Logs&) {}
  virtual void on_epoch_begin(int /*epoch*/, const Logs&) {}
  virtual void on_epoch_end(int /*epoch*/, const Logs&) {}
  virtual void on_batch_begin(int64_t /*batch*/, const Logs&) {}
  virtual void on_batch_end(int64_t /*batch*/, const Logs&) {}
  Sequential* model = nullptr;  // set by fit for the duration of training
};

struct History {
  std::map<std::string, std::vector<double>> history;  // per epoch
  std::vector<int> epochs;
  const std::vector<double>& operator[](const std::string& name) const;
};

}  // namespace tandem
