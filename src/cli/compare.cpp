// tandem compare: the reference tutorials' speed test as a command. Trains the same model with
// the same seed under each strategy, then prints a table, writes it as JSON and draws an SVG
// chart of samples/s and test accuracy per strategy, and says why a strategy is slower.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include <unistd.h>

#include <cstring>

#include "cli/common.h"
#include "cli/predict.h"

namespace tandem::cli {
namespace {

struct CompareFlags {
  CommonFlags common;
  int epochs = 10;
  std::string strategies = "default,mirrored:2,central:2";
  std::string report;
  std::string chart = "compare.svg";
  double target_accuracy = 0.0;
  PredictFlags predict;
};

struct Row {
  std::string strategy;
  int replicas = 1;
  double wall = 0, samples_per_second = 0, final_loss = NAN, test_loss = NAN, test_accuracy = NAN;
  double seconds_to_target = NAN, best_accuracy = NAN;  // with --target-accuracy
  double staleness = NAN, max_staleness = NAN;          // asynchronous parameter servers: over the epochs
};

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  for (std::string& name : split(list, ','))
    if (!name.empty()) out.push_back(std::move(name));
  if (out.empty()) fail("--strategies: empty list; expected e.g. default,mirrored:2,central:2");
  return out;
}

// The family of the strategy a row names (as the registry has it; data parallel where it knows none).
distribute::StrategyFamily family_of(const std::string& name) {
  const distribute::StrategyEntry* entry = distribute::strategy_entry(name);
  return entry != nullptr ? entry->family : distribute::StrategyFamily::DataParallel;
}
// Which of the closing questions a row answers (its registry entry's role).
using Role = distribute::CompareRole;
Role role_of(const std::string& name) {
  const distribute::StrategyEntry* entry = distribute::strategy_entry(name);
  return entry != nullptr ? entry->compare_role : Role::None;
}

// A row's name as a launched cluster's: "ps-async:1x3" for the in-process "ps-async:1x3:threads"
// (and for itself).
std::string as_launched(const std::string& name) {
  return name.ends_with(":threads") ? name.substr(0, name.size() - 8) : name;
}

// A strategy whose workers are processes (its row names how many, "multiworker:2",
// "ps-sync:1x3:1"): `tandem fit` under `tandem launch`, as its registry entry plans it. The
// chief's report is the row.
Row train_on_workers(const std::string& name, const CompareFlags& f) {
  distribute::LaunchPlan plan;
  try {
    plan = distribute::strategy_entry(name)->launch(name);
  } catch (const Error& e) {
    fail("--strategies: {}", e.what());
  }
  const std::vector<std::string>& launch_args = plan.launcher_args;
  const std::string& fit_strategy = plan.fit_strategy;
  char self[4096] = {};
  ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) fail("compare: cannot find the tandem executable to launch ({})", std::strerror(errno));
  char report_template[] = "/tmp/tandem-compare-XXXXXX";
  int fd = mkstemp(report_template);
  if (fd < 0) fail("compare: cannot make a temporary file: {}", std::strerror(errno));
  close(fd);
  std::string report = report_template;
  std::vector<std::string> args{self, "launch"};
  args.insert(args.end(), launch_args.begin(), launch_args.end());
  args.insert(args.end(), {"--",
                           self,
                           "fit",
                           "--model",
                           f.common.model,
                           "--dataset",
                           f.common.dataset,
                           "--epochs",
                           std::to_string(f.epochs),
                           "--batch-size",
                           std::to_string(f.common.batch_size),
                           "--seed",
                           std::to_string(f.common.seed),
                           "--threads",
                           std::to_string(f.common.threads),
                           "--strategy",
                           fit_strategy,
                           "--checkpoint-dir",
                           "",
                           "--log-dir",
                           "",
                           "--report",
                           report,
                           "--verbose",
                           "2"});
  if (f.target_accuracy > 0) args.insert(args.end(), {"--target-accuracy", fmt::format("{}", f.target_accuracy)});
  if (!f.common.data_dir.empty()) args.insert(args.end(), {"--data-dir", f.common.data_dir});
  std::string how;
  for (const std::string& a : launch_args) how += " " + a;
  std::printf("%s (tandem launch%s):\n", name.c_str(), how.c_str());
  std::fflush(stdout);
  std::optional<int> code = run_command(args);
  std::string text;
  try {
    text = io::read_file(report);
  } catch (const Error&) {
  }
  std::remove(report.c_str());
  if (code != 0 || text.empty()) fail("compare: {} failed (its output is above)", name);
  nlohmann::json j = nlohmann::json::parse(text);
  Row row;
  row.strategy = j["strategy"].get<std::string>();
  row.replicas = j["replicas"].get<int>();
  row.wall = j["training_seconds"].get<double>();
  row.samples_per_second = j["training_samples_per_second"].get<double>();
  row.final_loss = j["final_training_loss"].get<double>();
  row.test_loss = j["test_loss"].get<double>();
  row.test_accuracy = j["test_accuracy"].get<double>();
  if (plan.workers > 0) {
    row.strategy = name;  // with its servers and workers
    row.replicas = plan.workers;
  }
  if (j.contains("seconds_to_target") && !j["seconds_to_target"].is_null())
    row.seconds_to_target = j["seconds_to_target"].get<double>();
  if (j.contains("best_test_accuracy")) row.best_accuracy = j["best_test_accuracy"].get<double>();
  if (j.contains("staleness")) {
    double sum = 0, most = 0;
    for (double s : j["staleness"]) sum += s;
    for (double s : j["max_staleness"]) most = std::max(most, s);
    row.staleness = sum / static_cast<double>(std::max<size_t>(1, j["staleness"].size()));
    row.max_staleness = most;
  }
  return row;
}

Row train_under(const std::string& name, const CompareFlags& f) {
  if (distribute::launches_processes(name)) return train_on_workers(name, f);
  std::unique_ptr<distribute::Strategy> strategy = distribute::make_strategy(name, f.common.threads);
  ModelSpec spec = make_model(f.common.model, f.common.seed, strategy.get());
  Model& model = *spec.model;
  auto data = load_for_model(f.common.dataset, f.common.data_dir, model);
  model.compile(make_optimizer(choose_optimizer("", 0.0f, -1.0f, spec)), spec.loss, {"accuracy"});
  std::printf("%s:\n", strategy->name().c_str());
  std::fflush(stdout);
  auto start = std::chrono::steady_clock::now();
  FitOptions options{.epochs = f.epochs, .batch_size = f.common.batch_size, .verbose = 2};
  std::shared_ptr<TargetAccuracy> target;
  if (f.target_accuracy > 0) {
    target = std::make_shared<TargetAccuracy>(data.test.x, data.test.y, f.target_accuracy,
                                              std::max<int64_t>(f.common.batch_size, 256));
    options.callbacks.push_back(target);
  }
  History h = model.fit(data.train.x, data.train.y, options);
  Row row;
  row.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.strategy = strategy->name();
  row.replicas = strategy->num_replicas_in_sync();
  if (as_launched(name) != name)  // an in-process cluster: its workers, as the launched one's row counts them
    row.replicas = distribute::strategy_entry(name)->launch(as_launched(name)).workers;
  row.samples_per_second = static_cast<double>(data.train.x.dim(0)) * f.epochs / row.wall;
  row.final_loss = h["loss"].back();
  if (h.history.contains("staleness")) {  // asynchronous parameter servers in this process: over the epochs
    const std::vector<double>& mean = h.history.at("staleness");
    row.staleness = std::accumulate(mean.begin(), mean.end(), 0.0) / static_cast<double>(mean.size());
    row.max_staleness = *std::max_element(h.history.at("max_staleness").begin(), h.history.at("max_staleness").end());
  }
  Logs test = model.evaluate(data.test.x, data.test.y, {.batch_size = std::max<int64_t>(f.common.batch_size, 256)});
  row.test_loss = log_value(test, "loss");
  row.test_accuracy = log_value(test, "accuracy");
  if (target) {
    row.best_accuracy = target->best();
    if (target->reached()) row.seconds_to_target = target->seconds_to_target();
  }
  return row;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// Two bar panels side by side: training samples/s and test accuracy (%), one bar per strategy.
std::string svg_chart(const std::vector<Row>& rows, const std::string& title) {
  // Strategy names are slanted under their bars (35°), so long ones ("mirrored:2:deterministic")
  // neither overlap nor leave the picture; the bottom margin makes room for the longest.
  size_t longest = 0;
  for (const Row& r : rows) longest = std::max(longest, r.strategy.size());
  const int panel_w = 360, panel_h = 260, left = 90, top = 50, gap = 80;
  const int label_drop = static_cast<int>(7.0 * static_cast<double>(longest) * 0.58) + 20, bottom = label_drop + 40;
  int width = left + 2 * panel_w + gap + 20, height = top + panel_h + bottom;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
      width, height, width / 2, escape_xml(title));
  const char* colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"};
  for (int panel = 0; panel < 2; ++panel) {
    int x0 = left + panel * (panel_w + gap);
    auto value = [&](const Row& r) { return panel == 0 ? r.samples_per_second : 100.0 * r.test_accuracy; };
    double top_value = 0;
    for (const Row& r : rows) top_value = std::max(top_value, std::isfinite(value(r)) ? value(r) : 0.0);
    if (panel == 1) top_value = 100.0;
    if (top_value <= 0) top_value = 1;
    // Round the axis up to 1, 2 or 5 × 10^k so that the five ticks are round numbers.
    double decade = std::pow(10.0, std::floor(std::log10(top_value)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
      if (m * decade >= top_value) {
        top_value = m * decade;
        break;
      }
    // y axis with five ticks
    svg +=
        fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", x0, top, top + panel_h);
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", x0, top + panel_h,
                       x0 + panel_w);
    for (int t = 0; t <= 5; ++t) {
      double v = top_value * t / 5;
      int y = top + panel_h - static_cast<int>(panel_h * t / 5);
      svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>\n", x0, y, x0 + panel_w, y);
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:g}</text>\n", x0 - 4, y + 4, v);
    }
    std::string axis = panel == 0 ? "training samples / second" : "test accuracy (%)";
    svg += fmt::format("<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n", x0 - 62,
                       top + panel_h / 2, axis);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">strategy</text>\n", x0 + panel_w / 2,
                       top + panel_h + label_drop + 24);
    int n = static_cast<int>(rows.size()), slot = panel_w / std::max(1, n), bar = slot * 3 / 5;
    for (int i = 0; i < n; ++i) {
      double v = std::isfinite(value(rows[static_cast<size_t>(i)])) ? value(rows[static_cast<size_t>(i)]) : 0.0;
      int h = static_cast<int>(panel_h * v / top_value), x = x0 + i * slot + (slot - bar) / 2;
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", x, top + panel_h - h,
                         bar, h, colors[i % 6]);
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x + bar / 2,
                         top + panel_h - h - 4, panel == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}", v));
      svg += fmt::format("<text transform=\"translate({},{}) rotate(-35)\" text-anchor=\"end\">{}</text>\n",
                         x + bar / 2 + 4, top + panel_h + 16, escape_xml(rows[static_cast<size_t>(i)].strategy));
    }
  }
  return svg + "</svg>\n";
}

// The last tutorial's two questions, answered from the rows of an asynchronous and a synchronous
// parameter-server run: does synchronous training give a better model, and does it train faster?
void answer_the_tutorial(const std::vector<Row>& rows, const CompareFlags& f) {
  const Row *async = nullptr, *sync = nullptr;
  for (const Row& r : rows) {
    if (role_of(r.strategy) == Role::AsynchronousUpdates && !async) async = &r;
    std::string tasks = as_launched(r.strategy);
    if (role_of(r.strategy) == Role::SynchronousUpdates && std::count(tasks.begin(), tasks.end(), ':') == 1 && !sync)
      sync = &r;  // plain synchronous: no backup workers
  }
  if (!async || !sync) return;
  double a = f.target_accuracy > 0 ? async->best_accuracy : async->test_accuracy;
  double s = f.target_accuracy > 0 ? sync->best_accuracy : sync->test_accuracy;
  std::printf("Do synchronous updates produce a better model? %s: %s %.2f%%, %s %.2f%% test accuracy%s.\n",
              std::fabs(s - a) < 0.001 ? "No difference to speak of"
              : s > a                  ? "Yes"
                                       : "No",
              sync->strategy.c_str(), 100.0 * s, async->strategy.c_str(), 100.0 * a,
              f.target_accuracy > 0 ? " (the best epoch of each)" : "");
  std::string faster = fmt::format("{} trains {:.0f} samples/s, {} {:.0f}", sync->strategy, sync->samples_per_second,
                                   async->strategy, async->samples_per_second);
  if (f.target_accuracy > 0) {
    auto when = [](const Row& r) {
      return std::isnan(r.seconds_to_target) ? std::string("never") : fmt::format("in {:.1f} s", r.seconds_to_target);
    };
    bool sync_first = !std::isnan(sync->seconds_to_target) &&
                      (std::isnan(async->seconds_to_target) || sync->seconds_to_target < async->seconds_to_target);
    std::printf("Does it train faster? %s: %s reached %.1f%% %s, %s %s; %s.\n", sync_first ? "Yes" : "No",
                sync->strategy.c_str(), 100.0 * f.target_accuracy, when(*sync).c_str(), async->strategy.c_str(),
                when(*async).c_str(), faster.c_str());
  } else {
    std::printf("Does it train faster? %s: %s.\n", sync->samples_per_second > async->samples_per_second ? "Yes" : "No",
                faster.c_str());
  }
}

// Each parameter-server cluster run both in this process ("...:threads") and launched: what the
// threads gain over the processes.
void answer_in_process(const std::vector<Row>& rows, const CompareFlags& f) {
  for (const Row& local : rows) {
    std::string name = as_launched(local.strategy);
    if (name == local.strategy) continue;
    auto launched = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.strategy == name; });
    if (launched == rows.end()) continue;
    std::string target;
    if (f.target_accuracy > 0 && !std::isnan(local.seconds_to_target) && !std::isnan(launched->seconds_to_target))
      target = fmt::format(", {:.1f}% in {:.1f} s against {:.1f} s", 100.0 * f.target_accuracy, local.seconds_to_target,
                           launched->seconds_to_target);
    std::printf("In this process, %s trains %.0f samples/s, %.2fx the launched cluster's %.0f%s.\n",
                local.strategy.c_str(), local.samples_per_second,
                local.samples_per_second / launched->samples_per_second, launched->samples_per_second, target.c_str());
  }
}

// The last tutorial's closing questions for its vertical split, from the rows of a model-parallel
// run (or, without one, a pipeline's) and the default strategy's (one device): is training faster,
// is the model different? And beside the other ways of using as many devices (the data split,
// mirrored; the model split across, model-parallel, or along, pipeline; both, mirrored:D+...):
// which split pays for this model, the fastest of them.
void answer_the_split(const std::vector<Row>& rows) {
  const Row *split = nullptr, *one = nullptr;
  std::vector<const Row*> ways;
  using Family = distribute::StrategyFamily;
  auto is_split = [](const std::string& s) {
    return family_of(s) == Family::ModelParallel || family_of(s) == Family::Pipeline;
  };
  for (const Row& r : rows) {
    if (family_of(r.strategy) == Family::ModelParallel && r.strategy.find('+') == std::string::npos && !split)
      split = &r;
    if (role_of(r.strategy) == Role::OneDevice && !one) one = &r;
    if (is_split(r.strategy) || role_of(r.strategy) == Role::DataSplit) ways.push_back(&r);
  }
  if (!split)
    for (const Row& r : rows)
      if (family_of(r.strategy) == Family::Pipeline && r.strategy.find('+') == std::string::npos && !split) split = &r;
  if (!split || !one) return;
  double speed = split->samples_per_second / one->samples_per_second;
  std::printf("Split %s, is training any faster? %s: %s trains %.0f samples/s, %.2fx one device's %.0f.\n",
              family_of(split->strategy) == Family::Pipeline ? "into stages" : "vertically",
              speed > 1.05   ? "Yes"
              : speed < 0.95 ? "No, slower"
                             : "About the same",
              split->strategy.c_str(), split->samples_per_second, speed, one->samples_per_second);
  double gap = 100.0 * (split->test_accuracy - one->test_accuracy);
  std::printf("Is performance any different? %s: %.2f%% test accuracy split, %.2f%% on one device (%+.2f points).\n",
              std::fabs(gap) <= 0.2 ? "No" : "Yes", 100.0 * split->test_accuracy, 100.0 * one->test_accuracy, gap);
  if (ways.size() < 2) return;
  const Row* best = *std::max_element(ways.begin(), ways.end(), [](const Row* a, const Row* b) {
    return a->samples_per_second < b->samples_per_second;
  });
  std::string others;
  for (const Row* r : ways)
    if (r != best) others += fmt::format("{}{} {:.0f}", others.empty() ? "" : ", ", r->strategy, r->samples_per_second);
  std::printf("Which split pays for this model? %s: %s %.0f samples/s (%s).\n",
              best->strategy.find('+') != std::string::npos        ? "Both the data and the model"
              : family_of(best->strategy) == Family::Pipeline      ? "Stages of the model"
              : family_of(best->strategy) == Family::ModelParallel ? "Splitting the model"
                                                                   : "Splitting the data",
              best->strategy.c_str(), best->samples_per_second, others.c_str());
}

void run_compare(const CompareFlags& f) {
  f.common.apply();
  std::vector<std::string> names = split_list(f.strategies);
  for (const std::string& n : names)  // every name is valid before training
    if (!distribute::launches_processes(n)) distribute::make_strategy(n, f.common.threads);
  std::vector<Row> rows;
  for (const std::string& n : names) rows.push_back(train_under(n, f));
  const Row* base = nullptr;
  for (const Row& r : rows)
    if (role_of(r.strategy) == Role::OneDevice) base = &r;
  if (!base) base = &rows.front();

  std::printf("\n%s on %s, %d epochs, global batch %lld, seed %llu:\n", f.common.model.c_str(),
              f.common.dataset.c_str(), f.epochs, static_cast<long long>(f.common.batch_size),
              static_cast<unsigned long long>(f.common.seed));
  std::printf("%-26s %8s %9s %11s %9s %11s %9s", "strategy", "replicas", "wall s", "samples/s", "speed-up",
              "final loss", "test acc");
  bool target = f.target_accuracy > 0;
  if (target) std::printf(" %12s %9s", fmt::format("s to {:.1f}%", 100.0 * f.target_accuracy).c_str(), "best acc");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%-26s %8d %9.2f %11.0f %8.2fx %11.4f %8.2f%%", r.strategy.c_str(), r.replicas, r.wall,
                r.samples_per_second, r.samples_per_second / base->samples_per_second, r.final_loss,
                100.0 * r.test_accuracy);
    if (target)
      std::printf(" %12s %8.2f%%",
                  std::isnan(r.seconds_to_target) ? "not reached" : fmt::format("{:.1f}", r.seconds_to_target).c_str(),
                  100.0 * r.best_accuracy);
    if (!std::isnan(r.staleness)) std::printf("  (staleness: mean %.2f, max %.0f)", r.staleness, r.max_staleness);
    std::printf("\n");
  }
  answer_the_tutorial(rows, f);
  answer_in_process(rows, f);
  answer_the_split(rows);
  int cores = usable_cores();
  for (const Row& r : rows) {
    if (&r == base || r.samples_per_second >= base->samples_per_second) continue;
    int64_t per_replica = f.common.batch_size / r.replicas;
    std::string why;
    if (family_of(r.strategy) == distribute::StrategyFamily::ParameterServer)
      why = fmt::format(
          "every step moves the whole model twice {} (a pull before the batch, a push after) and passes "
          "the batch and its predictions through the chief, beside {} rows of compute; {} workers, the servers and "
          "the chief share {} cores",
          as_launched(r.strategy) != r.strategy ? "between threads" : "over loopback", f.common.batch_size, r.replicas,
          cores);
    else if (r.replicas > cores)
      why = fmt::format("{} replicas share {} cores, so they take turns instead of running side by side", r.replicas,
                        cores);
    else if (r.strategy.find("deterministic") != std::string::npos)
      why =
          "deterministic mode computes small fixed micro-batches one at a time and gathers every micro-batch's "
          "gradients; it buys bitwise reproducibility, not speed";
    else if (per_replica < 128)
      why = fmt::format(
          "each replica gets only {} rows of the global batch of {}, too little work to hide the per-step "
          "synchronization (a gradient all-reduce and two thread hand-offs); try --batch-size {} or more",
          per_replica, f.common.batch_size, 128 * r.replicas);
    else
      why = fmt::format(
          "the gradient all-reduce and the per-step hand-off to {} replica threads cost more than the "
          "parallel compute saves for this model",
          r.replicas);
    std::printf("warning: %s is slower than %s (%.2fx): %s.\n", r.strategy.c_str(), base->strategy.c_str(),
                r.samples_per_second / base->samples_per_second, why.c_str());
  }
  if (!f.report.empty()) {
    nlohmann::json j = {{"model", f.common.model}, {"dataset", f.common.dataset},
                        {"epochs", f.epochs},      {"global_batch", f.common.batch_size},
                        {"seed", f.common.seed},   {"cores", cores}};
    for (const Row& r : rows)
      j["runs"].push_back(
          {{"strategy", r.strategy},
           {"replicas", r.replicas},
           {"wall_seconds", r.wall},
           {"training_samples_per_second", r.samples_per_second},
           {"speedup_vs_default", r.samples_per_second / base->samples_per_second},
           {"final_training_loss", r.final_loss},
           {"test_loss", r.test_loss},
           {"test_accuracy", r.test_accuracy},
           {"seconds_to_target",
            std::isnan(r.seconds_to_target) ? nlohmann::json() : nlohmann::json(r.seconds_to_target)},
           {"best_test_accuracy", std::isnan(r.best_accuracy) ? nlohmann::json() : nlohmann::json(r.best_accuracy)},
           {"mean_staleness", std::isnan(r.staleness) ? nlohmann::json() : nlohmann::json(r.staleness)},
           {"max_staleness", std::isnan(r.max_staleness) ? nlohmann::json() : nlohmann::json(r.max_staleness)}});
    io::write_file_atomically(f.report, j.dump(2) + "\n");
  }
  if (!f.chart.empty()) {
    std::string title = fmt::format("{} on {}: {} epoch{}, global batch {}", f.common.model, f.common.dataset, f.epochs,
                                    f.epochs == 1 ? "" : "s", f.common.batch_size);
    io::write_file_atomically(f.chart, svg_chart(rows, title));
    std::printf("chart: %s\n", f.chart.c_str());
  }
}

}  // namespace

void add_compare(CLI::App& app) {
  auto flags = std::make_shared<CompareFlags>();
  CLI::App* cmd =
      app.add_subcommand("compare", "train the same model under several strategies and compare speed and accuracy");
  flags->common.add_to(*cmd);
  cmd->add_option("--epochs", flags->epochs, "epochs to train under each strategy")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--strategies", flags->strategies,
                  "comma-separated: " + distribute::compare_grammar() +
                      " (P parameter servers and W workers, or W worker processes, are started under tandem launch; "
                      "on parameter servers --batch-size is each worker's batch)")
      ->capture_default_str();
  cmd->add_option("--target-accuracy", flags->target_accuracy,
                  "evaluate on the test split after every epoch: the table gives the training seconds to first reach "
                  "this accuracy (a fraction: 0.98) and the best epoch's (0: no such evaluation)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--report", flags->report, "write the table as JSON to this file (default: none)")
      ->capture_default_str();
  cmd->add_option("--chart", flags->chart, "SVG chart of samples/s and test accuracy per strategy (\"\": none)")
      ->capture_default_str();
  flags->predict.add_to(*cmd);
  cmd->callback([flags] {
    if (!flags->predict.workers.empty()) return run_predict(flags->common, flags->predict);
    run_compare(*flags);
  });
}

}  // namespace tandem::cli
