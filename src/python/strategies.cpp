// tandem._tandem's strategies: scopes, run and reduce, hvd.
#include "python/binding.h"

#include <map>

#include "tandem/distribute/model_parallel.h"
#include "tandem/distribute/multi_worker.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/pipeline.h"
#include "tandem/distribute/slurm.h"
#include "tandem/distribute/strategy_registry.h"
#include "tandem/hvd.h"

namespace tandem::python {
namespace {
// A family's setting as a flat attribute of StrategySettings (StrategySettings::of<Family>).
template <class Family, class T>
void family_field(py::class_<distribute::StrategySettings>& settings, const char* name, T Family::*field) {
  settings.def_property(
      name, [field](distribute::StrategySettings& s) { return s.of<Family>().*field; },
      [field](distribute::StrategySettings& s, T value) { s.of<Family>().*field = value; });
}
}  // namespace

void register_strategies(py::module_& m) {
  // The options a strategy's name does not carry, as the command line's flags fill them
  // (strategy_registry.h); each family reads its own.
  // How a parameter server's variables are cut (tf.distribute.experimental.partitioners).
  py::class_<distribute::Partitioner>(m, "Partitioner")
      .def_static("min_size", &distribute::Partitioner::min_size, py::arg("min_shard_bytes"), py::arg("max_shards"))
      .def_static("fixed_shards", &distribute::Partitioner::fixed_shards, py::arg("num_shards"))
      .def_static("max_size", &distribute::Partitioner::max_size, py::arg("max_shard_bytes"), py::arg("max_shards"))
      .def_property_readonly("kind", [](const distribute::Partitioner& p) { return static_cast<int>(p.kind); });
  py::class_<distribute::StrategySettings> settings(m, "StrategySettings");
  settings.def(py::init<>())
      .def_readwrite("threads_per_replica", &distribute::StrategySettings::threads_per_replica)
      .def_property(
          "timeout", [](const distribute::StrategySettings& s) { return s.timeout.count() / 1000.0; },
          [](distribute::StrategySettings& s, double seconds) {
            if (!(seconds > 0)) fail("StrategySettings: timeout must be positive seconds, got {}", seconds);
            s.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
          });
  // Each family's settings as flat attributes, as tandem.distribute sets them.
  family_field(settings, "bucket_bytes", &distribute::DataParallelSettings::bucket_bytes);
  family_field(settings, "cluster_file", &distribute::ParameterServerSettings::cluster_file);
  family_field(settings, "cluster_json", &distribute::ParameterServerSettings::cluster_json);
  family_field(settings, "shard_bytes", &distribute::ParameterServerSettings::shard_bytes);
  family_field(settings, "in_process", &distribute::ParameterServerSettings::in_process);
  family_field(settings, "local_ps", &distribute::ParameterServerSettings::local_ps);
  family_field(settings, "local_workers", &distribute::ParameterServerSettings::local_workers);
  family_field(settings, "device_memory_bytes", &distribute::ModelParallelSettings::device_memory_bytes);
  // The families' option structs, as tandem.distribute fills them from TensorFlow's arguments: the
  // strategy's constructor checks them when Strategy.make_* makes it (the names parse into the same).
  using distribute::PsMode;
  py::class_<distribute::MirroredOptions>(m, "MirroredOptions")
      .def(py::init<>())
      .def_readwrite("num_replicas", &distribute::MirroredOptions::num_replicas)
      .def_readwrite("deterministic", &distribute::MirroredOptions::deterministic)
      // A replica per GPU: the indices of devices cuda:i.
      .def_property(
          "gpus",
          [](const distribute::MirroredOptions& o) {
            std::vector<int> gpus;
            for (const Device& d : o.devices) gpus.push_back(d.index);
            return gpus;
          },
          [](distribute::MirroredOptions& o, const std::vector<int>& gpus) {
            o.devices.clear();
            for (int i : gpus) o.devices.push_back(Device::cuda(i));
          });
  py::class_<distribute::MultiWorkerOptions>(m, "MultiWorkerOptions")
      .def(py::init<>())
      .def_readwrite("num_workers", &distribute::MultiWorkerOptions::num_workers)
      .def_readwrite("local_replicas", &distribute::MultiWorkerOptions::local_replicas)
      .def_readwrite("deterministic", &distribute::MultiWorkerOptions::deterministic)
      .def_readwrite("zero", &distribute::MultiWorkerOptions::zero);
  py::class_<distribute::ParameterServerOptions>(m, "ParameterServerOptions")
      .def(py::init<>())
      .def_property(
          "mode",
          [](const distribute::ParameterServerOptions& o) {
            return std::string(o.mode == PsMode::Synchronous ? "sync" : "async");
          },
          [](distribute::ParameterServerOptions& o, const std::string& mode) {
            if (mode != "async" && mode != "sync")
              fail("ParameterServerStrategy: mode must be 'async' or 'sync', got '{}'", mode);
            o.mode = mode == "sync" ? PsMode::Synchronous : PsMode::Asynchronous;
          })
      .def_readwrite("max_staleness", &distribute::ParameterServerOptions::max_staleness)
      .def_readwrite("backup_workers", &distribute::ParameterServerOptions::backup_workers)
      .def_readwrite("partitioner", &distribute::ParameterServerOptions::partitioner)
      .def_readwrite("prefetch", &distribute::ParameterServerOptions::prefetch)
      .def_readwrite("auth_dir", &distribute::ParameterServerOptions::auth_dir)
      .def_readwrite("insecure", &distribute::ParameterServerOptions::insecure)
      .def_readwrite("record", &distribute::ParameterServerOptions::record)
      .def_readwrite("replay", &distribute::ParameterServerOptions::replay)
      .def_readwrite("min_workers", &distribute::ParameterServerOptions::min_workers)
      .def_readwrite("threads_per_worker", &distribute::ParameterServerOptions::threads_per_worker);
  py::class_<distribute::ModelParallelOptions>(m, "ModelParallelOptions")
      .def(py::init<>())
      .def_readwrite("num_shards", &distribute::ModelParallelOptions::num_shards)
      .def_readwrite("data_replicas", &distribute::ModelParallelOptions::data_replicas);
  py::class_<distribute::PipelineOptions>(m, "PipelineOptions")
      .def(py::init<>())
      .def_readwrite("num_stages", &distribute::PipelineOptions::num_stages)
      .def_readwrite("micro_batches", &distribute::PipelineOptions::micro_batches)
      .def_readwrite("data_replicas", &distribute::PipelineOptions::data_replicas)
      .def_property(
          "schedule",
          [](const distribute::PipelineOptions& o) {
            return std::string(o.schedule == distribute::PipelineSchedule::GPipe ? "gpipe" : "1f1b");
          },
          [](distribute::PipelineOptions& o, const std::string& schedule) {
            if (schedule != "1f1b" && schedule != "gpipe")
              fail("PipelineStrategy: schedule must be '1f1b' or 'gpipe', got '{}'", schedule);
            o.schedule = schedule == "gpipe" ? distribute::PipelineSchedule::GPipe
                                             : distribute::PipelineSchedule::OneForwardOneBackward;
          });
  // SlurmClusterResolver's cluster: (TF_CONFIG's JSON naming this task, rank, this task's GPUs).
  m.def(
      "slurm_cluster",
      [](const std::vector<std::pair<std::string, int>>& jobs, int port_base, std::optional<int> gpus_per_node,
         std::optional<int> gpus_per_task, std::optional<int> tasks_per_node,
         const std::vector<std::pair<std::string, int>>& tasks_per_node_by_name) {
        distribute::SlurmOptions options;
        options.jobs = jobs;
        options.port_base = port_base;
        options.gpus_per_node = gpus_per_node;
        options.gpus_per_task = gpus_per_task;
        options.tasks_per_node = tasks_per_node;
        options.tasks_per_node_by_name = tasks_per_node_by_name;
        distribute::SlurmCluster got = distribute::slurm_cluster(options);
        return std::make_tuple(got.spec.to_json(got.spec.task()), got.rank, got.gpus);
      },
      py::arg("jobs"), py::arg("port_base"), py::arg("gpus_per_node"), py::arg("gpus_per_task"),
      py::arg("tasks_per_node"), py::arg("tasks_per_node_by_name"));
  // The registered strategies: (name, grammar, help) in the grammar's order.
  m.def("strategy_names", [] {
    std::vector<std::tuple<std::string, std::string, std::string>> out;
    for (const distribute::StrategyEntry& e : distribute::strategy_entries())
      out.emplace_back(e.name, e.grammar, e.help);
    return out;
  });
  // The handles made here by their strategies, so that the innermost scope's strategy (C++'s one
  // stack of scopes) finds its Python object.
  static std::map<const distribute::Strategy*, std::weak_ptr<StrategyHandle>> made;
  static const auto handle_of = [](std::unique_ptr<distribute::Strategy> strategy, py::object owner) {
    auto h = std::make_shared<StrategyHandle>();
    h->strategy = std::move(strategy);
    h->owner = std::move(owner);
    std::erase_if(made, [](const auto& entry) { return entry.second.expired(); });
    made[h->strategy.get()] = h;
    return h;
  };
  py::class_<StrategyHandle, std::shared_ptr<StrategyHandle>>(m, "Strategy")
      .def(py::init([](const std::string& spec, const distribute::StrategySettings& settings, py::object owner) {
             return handle_of(distribute::make_strategy(spec, settings), std::move(owner));
           }),
           py::arg("spec"), py::arg("settings"), py::arg("owner") = py::none())
      .def_static(
          "make_mirrored",
          [](const distribute::MirroredOptions& o, bool central, const distribute::StrategySettings& s,
             py::object owner) { return handle_of(distribute::make_mirrored(o, central, s), std::move(owner)); },
          py::arg("options"), py::arg("central"), py::arg("settings"), py::arg("owner"))
      .def_static(
          "make_multiworker",
          [](const distribute::MultiWorkerOptions& o, const distribute::StrategySettings& s, py::object owner) {
            return handle_of(distribute::make_multiworker(o, s), std::move(owner));
          },
          py::arg("options"), py::arg("settings"), py::arg("owner"))
      .def_static(
          "make_parameter_servers",
          [](const distribute::ParameterServerOptions& o, const distribute::StrategySettings& s, py::object owner) {
            return handle_of(distribute::make_parameter_servers(o, s), std::move(owner));
          },
          py::arg("options"), py::arg("settings"), py::arg("owner"))
      .def_static(
          "make_model_parallel",
          [](const distribute::ModelParallelOptions& o, const distribute::StrategySettings& s, py::object owner) {
            return handle_of(distribute::make_model_parallel(o, s), std::move(owner));
          },
          py::arg("options"), py::arg("settings"), py::arg("owner"))
      .def_static(
          "make_pipeline",
          [](const distribute::PipelineOptions& o, const distribute::StrategySettings& s, py::object owner) {
            return handle_of(distribute::make_pipeline(o, s), std::move(owner));
          },
          py::arg("options"), py::arg("settings"), py::arg("owner"))
      .def_property_readonly("name", [](StrategyHandle& h) { return h.strategy->name(); })
      // The jobs each replica (device) of this process has run: tests' proof that they ran.
      .def_property_readonly("replica_runs", [](StrategyHandle& h) { return h.strategy->extended().replica_runs(); })
      .def_property_readonly("num_replicas_in_sync",
                             [](StrategyHandle& h) { return h.strategy->num_replicas_in_sync(); })
      .def_property_readonly("is_chief", [](StrategyHandle& h) { return h.strategy->extended().is_chief(); })
      .def("run",
           [](StrategyHandle& h, py::function fn, const py::tuple& args) {
             distribute::Strategy& s = *h.strategy;
             int replicas = s.extended().num_local_replicas();
             // Each argument is the global batch, cut for the replicas as the strategy cuts a
             // distributed dataset's batch (StrategyExtended::replica_rows: evenly over mirrored
             // replicas; whole for each model-parallel device of a copy).
             std::vector<Tensor> whole;
             for (const py::handle& a : args)
               whole.push_back(tensor_from(py::reinterpret_borrow<py::object>(a), "run"));
             distribute::PerReplica<data::Element> parts;
             for (int r = 0; r < replicas; ++r) {
               data::Element e;
               for (const Tensor& t : whole) {
                 if (t.rank() == 0) throw Error("run: arguments need a batch axis to split over the replicas");
                 auto [begin, end] = s.extended().replica_rows(t.dim(0), r);
                 e.push_back(t.slice(begin, end));
               }
               parts.values.push_back(std::move(e));
             }
             if (!whole.empty() && whole[0].rank() > 0)
               parts.first_row = s.extended().replica_rows(whole[0].dim(0), 0).first;
             std::vector<py::object> results(static_cast<size_t>(replicas));
             {
               py::gil_scoped_release nogil;
               s.run(
                   [&](const data::Element& e) {
                     py::gil_scoped_acquire gil;
                     py::tuple a(e.size());
                     for (size_t i = 0; i < e.size(); ++i) a[i] = py::cast(e[i]);
                     results[static_cast<size_t>(distribute::replica_context()->local_replica_id)] = fn(*a);
                     return 0;
                   },
                   parts);
             }
             return results;
           })
      .def("reduce",
           [](StrategyHandle& h, const std::string& op, const py::list& values) {
             distribute::PerReplica<Tensor> per;
             per.values = tensors_from(values, "reduce");
             if (op != "SUM" && op != "MEAN")
               throw Error(fmt::format("reduce: op must be \"SUM\" or \"MEAN\", got \"{}\"", op));
             distribute::ReduceOp reduce_op = op == "SUM" ? distribute::ReduceOp::Sum : distribute::ReduceOp::Mean;
             py::gil_scoped_release nogil;
             return h.strategy->reduce(reduce_op, per);
           })
      .def("enter",
           [](py::object self) {
             auto& h = self.cast<StrategyHandle&>();
             py::object owner = h.owner.is_none() ? py::object(py::none()) : h.owner();
             distribute::enter_scope(h.strategy.get());
             h.open.push_back(owner.is_none() ? self : owner);
           })
      .def("exit", [](StrategyHandle& h) {
        distribute::exit_scope(h.strategy.get());
        if (!h.open.empty()) h.open.pop_back();
      });
  // The object whose strategy's scope is the innermost open on this thread (its handle's owner,
  // called: a weak reference), or None.
  m.def("current_strategy", []() -> py::object {
    auto it = made.find(distribute::current_strategy());
    std::shared_ptr<StrategyHandle> h = it != made.end() ? it->second.lock() : nullptr;
    return h && !h->owner.is_none() ? h->owner() : py::none();
  });
  // tf.distribute.get_replica_context().num_replicas_in_sync: the running replica's (inside
  // strategy.run), else the open scope's strategy's, else 1.
  m.def("replicas_in_sync", [] {
    if (const distribute::ReplicaContext* c = distribute::replica_context()) return c->num_replicas_in_sync();
    if (const distribute::Strategy* s = distribute::current_strategy()) return s->num_replicas_in_sync();
    return 1;
  });
  // The model made in a scope keeps its strategy: Model(...) under enter() is tied to it here.
  m.def("attach_strategy", [](ModelHandle& model, StrategyHandle& strategy) { model.strategy = strategy.strategy; });

  py::module_ hvd = m.def_submodule("hvd", "Horovod's API over Tandem's communicator");
  hvd.def("init", [] { hvd::init(); });
  hvd.def("is_initialized", &hvd::is_initialized);
  hvd.def("rank", &hvd::rank);
  hvd.def("size", &hvd::size);
  hvd.def("local_rank", &hvd::local_rank);
  hvd.def("local_size", &hvd::local_size);
  hvd.def("shutdown", &hvd::shutdown);
  hvd.def(
      "DistributedOptimizer",
      [](Optimizer& optimizer, int backward_passes_per_step, bool average_aggregated_gradients) {
        return std::shared_ptr<Optimizer>(hvd::DistributedOptimizer(
            optimizer.clone(), {.backward_passes_per_step = backward_passes_per_step,
                                .average_aggregated_gradients = average_aggregated_gradients}));
      },
      py::arg("optimizer"), py::arg("backward_passes_per_step"), py::arg("average_aggregated_gradients"));
  py::class_<hvd::BroadcastGlobalVariables, Callback, std::shared_ptr<hvd::BroadcastGlobalVariables>>(
      hvd, "BroadcastGlobalVariablesCallback")
      .def(py::init([](int root) { return std::make_shared<hvd::BroadcastGlobalVariables>(root); }),
           py::arg("root_rank"));
  py::class_<hvd::MetricAverage, Callback, std::shared_ptr<hvd::MetricAverage>>(hvd, "MetricAverageCallback")
      .def(py::init([] { return std::make_shared<hvd::MetricAverage>(); }));
}

}  // namespace tandem::python
