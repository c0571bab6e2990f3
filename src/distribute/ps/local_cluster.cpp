// An in-process parameter-server cluster (local_cluster.h): the servers and workers of a fit as
// threads, each a task of the cluster as a launched one's process would be.
#include "distribute/ps/local_cluster.h"

#include <algorithm>
#include <cstdio>

#include "distribute/ps/chief.h"
#include "tandem/error.h"
#include "tandem/runtime.h"

namespace tandem::distribute {

namespace {

// The fit's runner: the chief's coordinator, and the cluster's end with it.
class LocalRunner : public StepRunner {
 public:
  LocalRunner(std::unique_ptr<StepRunner> coordinator, std::function<void()> end)
      : coordinator_(std::move(coordinator)), end_(std::move(end)) {}
  ~LocalRunner() override {
    coordinator_.reset();
    end_();
  }
  bool lazy_batches() const override { return coordinator_->lazy_batches(); }
  void check_batch(bool have, int64_t rows, int epoch, int64_t step) override {
    coordinator_->check_batch(have, rows, epoch, step);
  }
  std::optional<double> run(const GlobalBatch& batch, uint64_t key) override { return coordinator_->run(batch, key); }
  void finish_epoch() override { coordinator_->finish_epoch(); }
  std::vector<std::pair<std::string, double>> epoch_figures() override { return coordinator_->epoch_figures(); }

 private:
  std::unique_ptr<StepRunner> coordinator_;
  std::function<void()> end_;
};

}  // namespace

std::unique_ptr<StepRunner> ParameterServerExtended::start_local(const StepParts& parts) {
  stop_local();  // an earlier fit's, should its runner still be alive
  auto tasks = std::make_unique<LocalTasks>();
  tasks->generation = ++local_generation_;
  int workers = num_workers();
  for (int w = 0; w < workers; ++w) {
    std::vector<std::shared_ptr<layers::Layer>> copy;
    for (const auto& l : parts.replicas[0].layers) {
      copy.push_back(replica_layer(*l, 1 + w));
      if (!options_.worker_devices.empty()) copy.back()->place_on(options_.worker_devices[static_cast<size_t>(w)]);
    }
    tasks->models.push_back(std::make_shared<ModelReplicas>(*this, copy, parts.replicas[0].graph));
    tasks->batches.push_back(parts.batch_at);  // each worker its own reader (made on first use) of the same tensors
  }
  for (int s = 0; s < num_servers(); ++s) tasks->server_optimizers.push_back(parts.optimizer.clone());
  int threads = options_.threads_per_worker > 0 ? options_.threads_per_worker : std::max(1, usable_cores() / workers);
  local_ = std::move(tasks);

  // Each task as a launched cluster's process would run it: its links (made with the chief's),
  // then its part until the chief ends the job. A task that fails says so to the others (the
  // chief's fit ends with its message) and on standard error, as a process would.
  auto run_task = [this, tasks = local_.get(), loss = &parts.loss, optimizer = &parts.optimizer, seed = parts.seed,
                   threads](TaskId id) {
    set_num_threads(threads);
    std::string name = cluster_.describe(id);
    try {
      ps::ClusterLink link(cluster_.as_task(id), options_.timeout, nullptr, tasks->context);
      try {
        bool worker = id.type == "worker";
        auto i = static_cast<size_t>(id.index);
        StepParts own{.replicas = *tasks->models[worker ? i : 0],
                      .loss = *loss,
                      .optimizer = *optimizer,
                      .seed = seed,
                      .metrics = {},
                      .loss_metric = nullptr,
                      .batch_at = worker ? tasks->batches[i] : BatchAt()};
        ps::serve_task(link, options_, own, worker ? nullptr : std::move(tasks->server_optimizers[i]));
      } catch (const std::exception& e) {
        link.control().report_failure(e.what());  // named as this task's by the others
        throw;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    }
  };
  for (int s = 0; s < num_servers(); ++s) local_->threads.emplace_back(run_task, TaskId{"ps", s});
  for (int w = 0; w < workers; ++w) local_->threads.emplace_back(run_task, TaskId{"worker", w});
  try {
    connect();
    uint64_t generation = local_->generation;
    return std::make_unique<LocalRunner>(make_coordinator(*chief_, parts),
                                         [this, generation] { stop_local(generation); });
  } catch (...) {
    stop_local();
    throw;
  }
}

void ParameterServerExtended::stop_local(uint64_t generation) {
  if (!local_ || (generation != 0 && generation != local_->generation)) return;
  if (chief_) {
    for (auto [steps, count] : chief_->steps_ahead) steps_ahead_before_[steps] += count;
    worker_steps_before_.resize(std::max(worker_steps_before_.size(), chief_->worker_steps.size()), 0);
    for (size_t w = 0; w < chief_->worker_steps.size(); ++w) worker_steps_before_[w] += chief_->worker_steps[w];
    try {
      if (!links_->link->control().failed()) {
        chief_->stop_all();
        links_->link->control().leave_and_wait();
      }
    } catch (const std::exception& e) {  // the threads end by the control plane's failure or timeout
      std::fprintf(stderr, "chief: ending the in-process cluster: %s\n", e.what());
    }
  }
  chief_.reset();
  links_.reset();
  for (std::thread& t : local_->threads) t.join();
  local_.reset();
}

}  // namespace tandem::distribute
