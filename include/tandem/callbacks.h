#pragma once
// The callback interface of fit(), and the History it returns.
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class Model;

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
  // Before the progress bar, the history and on_epoch_end see an epoch's logs: a callback may
  // change them (hvd::MetricAverage averages them over the processes).
  virtual void on_epoch_logs(int /*epoch*/, Logs& /*logs*/) {}
  virtual void on_batch_begin(int64_t /*batch*/, const Logs&) {}
  virtual void on_batch_end(int64_t /*batch*/, const Logs&) {}
  Model* model = nullptr;  // set by fit for the duration of training

 protected:
  // Whether this process writes files: the chief of a multi-worker strategy, or the only process.
  // Callbacks that write (checkpoints, backups, logs) write on the chief only; every worker reads.
  bool writes_files() const;
  // Where the strategy gathers a checkpoint's state from every worker (collects_state_together):
  // on a worker that does not write, takes part in the gathering; true where nothing more is to do.
  bool takes_part_only() const;
};

struct History {
  std::map<std::string, std::vector<double>> history;  // per epoch
  std::vector<int> epochs;
  const std::vector<double>& operator[](const std::string& name) const;
};

}  // namespace tandem

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

namespace tandem {

namespace io {
class EventWriter;
}

// Which way a monitored value improves: "min", "max", or "auto" (max for accuracy-like names).
enum class MonitorMode { Auto, Min, Max };

// Tracks the best value of one logged quantity.
class Monitor {
 public:
  Monitor(std::string name, MonitorMode mode, double min_delta = 0.0);
  // Whether `logs` holds an improvement (recording it); absent values warn once and return nullopt.
  std::optional<bool> improved(const Logs& logs, const char* who);
  const std::string& name() const { return name_; }
  double best() const { return best_; }
  void reset();

 private:
  std::string name_;
  bool maximize_;
  double min_delta_, best_;
  bool warned_ = false;
};

struct ModelCheckpointOptions {
  std::string monitor = "val_loss";
  bool save_best_only = false;
  bool save_weights_only = false;  // false: a full checkpoint (position, seed, metrics)
  MonitorMode mode = MonitorMode::Auto;
  int64_t save_freq = 0;  // 0: every epoch; N: every N training steps
};

// Saves the model to `filepath` after each epoch (or N steps). The path may hold {epoch}
// (1-based, as Keras), {epoch:03d}, {step}, and any logged value such as {val_loss:.4f}.
// Also records the newest file in "checkpoint" beside it, for latest_checkpoint().
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, ModelCheckpointOptions options = {});
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_batch_end(int64_t batch, const Logs& logs) override;
  const std::string& last_saved() const { return last_saved_; }

 private:
  void save(int epoch, const Logs& logs);
  std::string filepath_;
  ModelCheckpointOptions options_;
  Monitor monitor_;
  int64_t steps_ = 0;
  std::string last_saved_;
};

// The newest checkpoint in `directory` (from its "checkpoint" index, else the newest
// .safetensors file), or "" when there is none.
std::string latest_checkpoint(const std::string& directory);

struct BackupAndRestoreOptions {
  int64_t save_freq = 0;          // 0: at each epoch end; N: also every N training steps
  bool delete_checkpoint = true;  // remove the backup once fit completes
};

// Keeps a backup of the training state in `backup_dir`; when fit starts and a backup exists (an
// earlier fit was interrupted, even by SIGKILL), restores it and resumes at the saved batch.
class BackupAndRestore : public Callback {
 public:
  explicit BackupAndRestore(std::string backup_dir, BackupAndRestoreOptions options = {});
  void on_train_begin(const Logs&) override;
  void on_batch_end(int64_t batch, const Logs&) override;
  void on_epoch_end(int epoch, const Logs&) override;
  void on_train_end(const Logs&) override;
  std::string backup_path() const { return dir_ + "/backup.safetensors"; }

 private:
  void write_backup();
  std::string dir_;
  BackupAndRestoreOptions options_;
  int64_t steps_ = 0;
};

struct TensorBoardOptions {
  int64_t update_freq = 0;  // 0: per epoch only; N: also batch values every N steps
};

// Writes TensorBoard event files: <log_dir>/train and <log_dir>/validation, scalars
// epoch_loss, epoch_<metric>, epoch_learning_rate (and batch_* every N steps).
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(std::string log_dir, TensorBoardOptions options = {});
  ~TensorBoard() override;
  void on_train_begin(const Logs&) override;
  void on_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs&) override;

 private:
  std::string log_dir_;
  TensorBoardOptions options_;
  std::unique_ptr<io::EventWriter> train_, validation_;
  int64_t global_step_ = 0;
};

// Appends one row per epoch: epoch and every logged value.
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string filename, char separator = ',', bool append = false);
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;

 private:
  std::string filename_;
  char separator_;
  bool append_;
  std::vector<std::string> columns_;
};

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;
  int patience = 0;
  MonitorMode mode = MonitorMode::Auto;
  bool restore_best_weights = false;
};

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs&) override;
  int stopped_epoch() const { return stopped_epoch_; }

 private:
  EarlyStoppingOptions options_;
  Monitor monitor_;
  int wait_ = 0, stopped_epoch_ = -1;
  std::vector<std::vector<float>> best_weights_;
};

// Stops training at the first batch whose loss is NaN or infinite.
// Stops fit at the first batch whose loss is not finite (NaN or infinite), saying so once; the
// checkpoint callbacks never save weights that are not finite, so the last good one stays last.
class TerminateOnNaN : public Callback {
 public:
  void on_train_begin(const Logs& logs) override;
  void on_epoch_begin(int epoch, const Logs& logs) override { epoch_ = epoch; }
  void on_batch_end(int64_t batch, const Logs& logs) override;
  bool terminated() const { return terminated_; }
  std::string where() const;  // "epoch 1, batch 12 (loss nan)"

 private:
  int epoch_ = 0;
  bool terminated_ = false;
  int64_t batch_ = 0;
  double loss_ = 0;
};

// Sets the learning rate at each epoch's start from schedule(epoch, current lr).
class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(std::function<float(int epoch, float lr)> schedule) : schedule_(std::move(schedule)) {}
  void on_epoch_begin(int epoch, const Logs&) override;

 private:
  std::function<float(int, float)> schedule_;
};

struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;
  int patience = 10;
  double min_delta = 1e-4;
  int cooldown = 0;
  double min_lr = 0.0;
  MonitorMode mode = MonitorMode::Auto;
};

class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options = {});
  void on_epoch_end(int epoch, const Logs& logs) override;

 private:
  ReduceLROnPlateauOptions options_;
  Monitor monitor_;
  int wait_ = 0, cooldown_left_ = 0;
};

}  // namespace tandem
