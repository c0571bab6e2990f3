// ModelCheckpoint, BackupAndRestore and latest_checkpoint.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>

#include "tandem/model.h"

namespace tandem {
namespace fs = std::filesystem;

namespace {

// Expands {epoch}, {epoch:03d}, {step} and {<log name>[:fmt]} in a Keras-style file pattern.
std::string expand_pattern(const std::string& pattern, int epoch, int64_t step,
                           const std::function<double(const std::string&)>& value) {
  static const std::regex field(R"(\{([A-Za-z_][A-Za-z0-9_]*)(:[^}]*)?\})");
  std::string out;
  auto begin = std::sregex_iterator(pattern.begin(), pattern.end(), field);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out += pattern.substr(last, static_cast<size_t>(m.position()) - last);
    std::string name = m[1], spec = m[2].matched ? m[2].str() : "";
    std::string f = "{" + spec + "}";
    try {
      if (name == "epoch") out += fmt::format(fmt::runtime(f), epoch);
      else if (name == "step") out += fmt::format(fmt::runtime(f), step);
      else out += fmt::format(fmt::runtime(f), value(name));
    } catch (const fmt::format_error& e) {
      fail("ModelCheckpoint: bad format \"{}\" for {{{}}} in \"{}\": {}", spec, name, pattern, e.what());
    }
    last = static_cast<size_t>(m.position() + m.length());
  }
  return out + pattern.substr(last);
}

// A checkpoint of weights that are not finite (a diverged run) would replace the last good one.
bool weights_are_finite(Model& model) {
  for (Variable* v : model.variables()) {
    Tensor t = v->value.to(Device::cpu()).contiguous();
    if (t.dtype() != DType::Float32) continue;
    const float* p = t.data<float>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (!std::isfinite(p[i])) return false;
  }
  return true;
}

void record_latest(const std::string& path) {
  fs::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  io::write_file_atomically(dir + "/checkpoint", p.filename().string() + "\n");
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(std::string filepath, ModelCheckpointOptions options)
    : filepath_(std::move(filepath)), options_(std::move(options)), monitor_(options_.monitor, options_.mode) {
  if (filepath_.empty()) fail("ModelCheckpoint: filepath is empty");
  if (options_.save_freq < 0)
    fail("ModelCheckpoint: save_freq must be 0 (per epoch) or positive, got {}", options_.save_freq);
  // Rejects malformed fields now; unknown log names are caught when saving.
  expand_pattern(filepath_, 1, 1, [](const std::string&) { return 0.0; });
}

void ModelCheckpoint::save(int epoch, const Logs& logs) {
  if (!weights_are_finite(*model)) return;  // the same on every worker, as the logs are
  if (options_.save_best_only) {
    auto better = monitor_.improved(logs, "ModelCheckpoint");
    if (!better || !*better) return;
  }
  if (takes_part_only()) return;
  std::string path =
      expand_pattern(filepath_, epoch + 1, steps_, [&](const std::string& n) { return log_value(logs, n); });
  if (!path.ends_with(".safetensors")) path += ".safetensors";
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  distribute::JobPhase phase(*model->strategy(), "checkpoint writing");
  if (options_.save_weights_only) model->save_weights(path);
  else model->save_checkpoint(path);
  record_latest(path);
  last_saved_ = path;
}

void ModelCheckpoint::on_epoch_end(int epoch, const Logs& logs) {
  if (options_.save_freq == 0) save(epoch, logs);
}

void ModelCheckpoint::on_batch_end(int64_t, const Logs& logs) {
  ++steps_;
  if (options_.save_freq > 0 && steps_ % options_.save_freq == 0) save(model->position().epoch, logs);
}

std::string latest_checkpoint(const std::string& directory) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return "";
  std::ifstream index(directory + "/checkpoint");
  std::string name;
  if (index && std::getline(index, name) && !name.empty() && fs::exists(directory + "/" + name, ec))
    return directory + "/" + name;
  std::string newest;
  fs::file_time_type newest_time{};
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    if (entry.path().extension() != ".safetensors") continue;
    auto t = entry.last_write_time(ec);
    if (newest.empty() || t > newest_time) {
      newest = entry.path().string();
      newest_time = t;
    }
  }
  return newest;
}

BackupAndRestore::BackupAndRestore(std::string backup_dir, BackupAndRestoreOptions options)
    : dir_(std::move(backup_dir)), options_(options) {
  if (dir_.empty()) fail("BackupAndRestore: backup_dir is empty");
  if (options_.save_freq < 0)
    fail("BackupAndRestore: save_freq must be 0 (per epoch) or positive, got {}", options_.save_freq);
}

void BackupAndRestore::on_train_begin(const Logs&) {
  fs::create_directories(dir_);
  steps_ = 0;
  // A write cut short by a kill leaves its temporary file; the backup itself is whole or absent.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec))
    if (writes_files())
      if (entry.path().filename().string().starts_with("backup.safetensors.tmp")) fs::remove(entry.path(), ec);
  if (!fs::exists(backup_path())) return;
  // Only a backup of this same run is resumed (the replica count may differ).
  std::map<std::string, std::string> saved = io::load_safetensors(backup_path()).metadata;
  std::string differences;
  for (const auto& [key, value] : model->run_signature()) {
    auto it = saved.find("run." + key);
    if (it == saved.end() || it->second == value) continue;  // a backup from before runs were recorded: unchecked
    differences += fmt::format("{}\n  {}: \"{}\" in the backup, \"{}\" now", differences.empty() ? "" : ";", key,
                               it->second, value);
  }
  if (!differences.empty())
    fail(
        "BackupAndRestore: the backup in \"{}\" is of another run, so it is not resumed:{}\nTo start this run fresh, "
        "remove \"{}\" or train into another directory; to resume that run, start it again with its own settings",
        dir_, differences, dir_);
  TrainingPosition p = model->load_checkpoint(backup_path());
  model->resume_from = p;
  if (writes_files())  // the chief speaks for every worker
    std::printf("Restored the backup in %s: resuming at epoch %d, batch %lld\n", dir_.c_str(), p.epoch + 1,
                static_cast<long long>(p.step));
}

void BackupAndRestore::on_batch_end(int64_t, const Logs&) {
  ++steps_;
  if (options_.save_freq > 0 && steps_ % options_.save_freq == 0) write_backup();
}

void BackupAndRestore::on_epoch_end(int, const Logs&) { write_backup(); }

void BackupAndRestore::write_backup() {
  if (!weights_are_finite(*model) || takes_part_only()) return;
  distribute::JobPhase phase(*model->strategy(), "backup writing");
  model->save_checkpoint(backup_path());
}

void BackupAndRestore::on_train_end(const Logs&) {
  // Reached only when fit returns normally (early stopping included): the run is complete,
  // unless it diverged, when the backup holds its last good state.
  if (options_.delete_checkpoint && writes_files() && weights_are_finite(*model)) fs::remove(backup_path());
}

}  // namespace tandem
