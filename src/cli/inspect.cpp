// tandem evaluate, predict, summary and datasets.
#include <filesystem>

#include "cli/common.h"
#include "tandem/distribute/parameter_server.h"

namespace tandem::cli {
namespace {

struct InspectFlags {
  CommonFlags common;
  std::string weights;
  int64_t count = 10;
};

// The weights file given, or the newest checkpoint in the directory given; says which.
std::string resolve_weights(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) {
    file = latest_checkpoint(path);
    if (file.empty()) fail("--weights: directory \"{}\" holds no checkpoint", path);
  }
  std::printf("Weights: %s\n", file.c_str());
  return file;
}

void add_weights_flag(CLI::App* cmd, InspectFlags& f) {
  cmd->add_option("--weights", f.weights, "safetensors file, or a checkpoint directory (its newest checkpoint)")
      ->required();
}

}  // namespace

void add_evaluate(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("evaluate", "evaluate trained weights on the test split");
  f->common.add_to(*cmd);
  add_weights_flag(cmd, *f);
  cmd->callback([f] {
    f->common.apply();
    ModelSpec spec = make_model(f->common.model, f->common.seed);
    auto data = load_for_model(f->common.dataset, f->common.data_dir, *spec.model);
    spec.model->compile(make_optimizer(choose_optimizer("", 0.0f, -1.0f, spec)), spec.loss, {"accuracy"});
    spec.model->load_weights(resolve_weights(f->weights));
    Logs test = spec.model->evaluate(data.test.x, data.test.y, {.batch_size = f->common.batch_size});
    std::printf("Test loss: %.4f - test accuracy: %.2f%%\n", log_value(test, "loss"),
                100.0 * log_value(test, "accuracy"));
  });
}

void add_predict(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("predict", "print the predicted class of the first test samples");
  f->common.add_to(*cmd);
  add_weights_flag(cmd, *f);
  cmd->add_option("--count", f->count, "how many test samples")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->callback([f] {
    f->common.apply();
    ModelSpec spec = make_model(f->common.model, f->common.seed);
    auto data = load_for_model(f->common.dataset, f->common.data_dir, *spec.model);
    spec.model->load_weights(resolve_weights(f->weights));
    int64_t n = std::min(f->count, data.test.x.dim(0));
    Tensor out = spec.model->predict(data.test.x.slice(0, n), f->common.batch_size);
    int64_t classes = out.dim(1);
    std::printf("index predicted label\n");
    for (int64_t i = 0; i < n; ++i) {
      const float* row = out.data<float>() + i * classes;
      int64_t best = std::max_element(row, row + classes) - row;
      std::printf("%5lld %9lld %5d\n", static_cast<long long>(i), static_cast<long long>(best),
                  data.test.y.data<int32_t>()[i]);
    }
  });
}

void add_summary(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("summary", "print a model's layers and parameter counts");
  f->common.add_to(*cmd, false);
  cmd->callback([f] { make_model(f->common.model, f->common.seed).model->print_summary(); });
}

void add_keys(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "keys", "make CurveZMQ keys for a parameter-server cluster's --auth (server, client, allowed/)");
  cmd->add_option("dir", *dir, "the directory to write them into (made if missing)")->required();
  cmd->callback([dir] {
    distribute::make_cluster_keys(*dir);
    std::printf(
        "keys: %s/server.key and client.key (secret), server.pub, client.pub, allowed/client.pub; copy the "
        "directory to every machine and pass --auth %s to every task\n",
        dir->c_str(), dir->c_str());
  });
}

void add_datasets(CLI::App& app) {
  auto data_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("datasets", "list the datasets and where they were found");
  cmd->add_option("--data-dir", *data_dir, "directory searched first")->capture_default_str();
  cmd->callback([data_dir] {
    std::printf("search path:");
    for (const auto& d : data::dataset_search_path(*data_dir)) std::printf(" %s", d.c_str());
    std::printf("\n");
    for (const char* name : {"mnist", "fashion-mnist"}) {
      try {
        auto d = data::load_dataset(name, {.data_dir = *data_dir});
        std::printf("%-14s %s: %lld train, %lld test, images %lldx%lld, 10 classes\n", name, d.directory.c_str(),
                    static_cast<long long>(d.train.x.dim(0)), static_cast<long long>(d.test.x.dim(0)),
                    static_cast<long long>(d.train.x.dim(1)), static_cast<long long>(d.train.x.dim(2)));
      } catch (const Error& e) {
        std::printf("%-14s not available: %s\n", name, e.what());
      }
    }
    try {
      auto d = data::load_cifar10(*data_dir);
      std::printf("%-14s %s: %lld train, %lld test, images 32x32x3, 10 classes\n", "cifar10", d.directory.c_str(),
                  static_cast<long long>(d.train.x.dim(0)), static_cast<long long>(d.test.x.dim(0)));
    } catch (const Error& e) {
      std::printf("%-14s not available: %s\n", "cifar10", e.what());
    }
  });
}

}  // namespace tandem::cli
