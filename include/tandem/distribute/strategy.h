#pragma once
// Strategy: how a model trains across replicas, switched by one line as tf.distribute does.
// A model made inside a strategy's scope trains under it:
//   distribute::MirroredStrategy mirrored(2);
//   auto scope = mirrored.scope();
//   Sequential model;  ...  model.fit(x, y, {.batch_size = 256});   // 256 = the global batch
#include <functional>
#include <memory>
#include <string>

#include "tandem/distribute/communicator.h"

namespace tandem::distribute {

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;  // "mirrored:2"
  virtual int num_replicas_in_sync() const = 0;
  // Runs fn(replica) once per replica, each on its own thread, and waits. If any replica
  // throws, the others' collectives fail too and the first error is rethrown here.
  virtual void run(const std::function<void(int replica)>& fn) = 0;
  virtual Communicator& communicator() = 0;
  // True when each replica keeps its own copy of the variables (mirrored); false when they
  // live once and the reduced gradient is applied once (central storage).
  virtual bool mirrors_variables() const { return true; }

  // While alive, models constructed on this thread train under the strategy (which must then
  // outlive them: a model keeps a pointer to it, as a Keras model keeps its strategy).
  class Scope {
   public:
    explicit Scope(Strategy* s);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Strategy* previous_;
  };
  Scope scope() { return Scope(this); }
};

// The strategy of the innermost live scope on this thread, or null (the default strategy).
Strategy* current_strategy();

// Everything on one device (the calling thread), through the strategy interface: what the
// default strategy does, made explicit (tf.distribute.OneDeviceStrategy).
class OneDeviceStrategy : public Strategy {
 public:
  OneDeviceStrategy();
  std::string name() const override { return "one_device"; }
  int num_replicas_in_sync() const override { return 1; }
  void run(const std::function<void(int replica)>& fn) override { fn(0); }
  Communicator& communicator() override { return *comm_; }

 private:
  std::unique_ptr<Communicator> comm_;
};

// One replica per group of cores, variables mirrored, gradients all-reduced every step.
// On the CPU a replica is a thread pinned to its cores, with cores / replicas intra-op threads.
class MirroredStrategy : public Strategy {
 public:
  explicit MirroredStrategy(int num_replicas = 0, int threads_per_replica = 0);  // 0: one per core / cores ÷ replicas
  ~MirroredStrategy() override;
  std::string name() const override;
  int num_replicas_in_sync() const override { return replicas_; }
  void run(const std::function<void(int replica)>& fn) override;
  Communicator& communicator() override { return *comm_; }
  int threads_per_replica() const { return threads_per_replica_; }

 private:
  struct Workers;
  int replicas_, threads_per_replica_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Workers> workers_;
};

// Variables live once, on the host; compute is replicated as in MirroredStrategy (replica
// threads read the one copy), the gradients are summed and the update is applied once.
class CentralStorageStrategy : public MirroredStrategy {
 public:
  explicit CentralStorageStrategy(int num_replicas = 0, int threads_per_replica = 0)
      : MirroredStrategy(num_replicas, threads_per_replica) {}
  std::string name() const override;
  bool mirrors_variables() const override { return false; }
};

}  // namespace tandem::distribute
