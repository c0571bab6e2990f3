#pragma once
// The devices of a ModelParallelStrategy: each one's stack of layers (slices of the split Dense
// layers, copies of the others) beside the model's whole stack, each one's copy of the
// optimizer with its slices of the slots, and the way from the slices back to whole tensors.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tandem/distribute/model_parallel.h"

namespace tandem::distribute {

struct ModelParallelExtended::Shards {
  // `devices`: this process's; `across`: over processes, the local device's tensor group (whole
  // tensors are gathered over it: collective), else null.
  Shards(int devices, Communicator* across) : devices_(devices), across_(across) {}
  // Device `device`'s stack made from the model's `whole` (device 0 first: what was kept goes).
  void keep(const std::vector<std::shared_ptr<layers::Layer>>& whole, int device,
            const std::vector<std::shared_ptr<layers::Layer>>& mine);
  // The device's copy of `model_optimizer`, made for every device on first use (and again for
  // another optimizer, or after a restore renewed its id), its slots cut from the model
  // optimizer's as the variables are.
  Optimizer& optimizer(Optimizer& model_optimizer, int device, std::span<Variable* const> variables);
  // The model's variables (and `model_optimizer`'s slots and step; null: the one the devices'
  // optimizers were last made from) made whole from the devices'.
  void write_back(Optimizer* model_optimizer);
  // From now on the model's variables hold (after fit and after each run() of a custom loop: what
  // callbacks or the user do to the whole model counts, EarlyStopping's best weights):
  // checkpoints read them as they are, and before the devices run again their pieces are cut
  // again from them (reslice; the optimizers' slots stay, as written back, unless the model's
  // optimizer is restored, which renews its id).
  void hand_to_model() { whole_holds_ = true; }
  bool whole_holds() const { return whole_holds_; }
  void reslice();
  // The entries of a model's state that the devices hold in pieces, made whole.
  void gather(std::vector<std::pair<std::string, Tensor>>& state);
  // The bytes one device holds at most: its variables and `slots` slots per trainable one.
  int64_t bytes_per_device(int slots) const;
  bool made() const { return !of_device_.empty() && of_device_.size() == static_cast<size_t>(devices_); }

 private:
  struct Where {
    size_t layer, variable;
  };
  std::optional<Where> where(const std::string& variable) const;
  // Whole variable `at` from each device's piece of it (`piece(device)`).
  Tensor whole_of(const Where& at, const std::function<Tensor(int device)>& piece) const;
  // Device d's slot `slot` of variable `name`.
  Tensor device_slot(int device, const std::string& name, const std::string& slot) const;

  int devices_;
  Communicator* across_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<layers::Layer>> whole_;
  std::vector<std::vector<std::shared_ptr<layers::Layer>>> of_device_;
  std::map<std::string, Where> by_name_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  uint64_t optimizer_id_ = 0;             // of the model's optimizer the copies were made from
  Optimizer* model_optimizer_ = nullptr;  // that optimizer (the model's, alive while its replicas are)
  bool whole_holds_ = false;
};

}  // namespace tandem::distribute
