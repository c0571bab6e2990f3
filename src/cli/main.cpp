// tandem: train, evaluate and inspect models without writing C++.
#include <cstdio>

#include "cli/common.h"

int main(int argc, char** argv) {
  // Line by line even into a file or a pipe, so that a log taking both stdout and stderr (a
  // launched job's tasks write into one) keeps the order they were written in.
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  // `tandem launch` takes mpirun's spellings (-np) and passes everything after "--" through.
  if (argc >= 2 && std::string(argv[1]) == "launch") {
    try {
      return tandem::cli::run_launch(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const tandem::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    }
  }
  CLI::App app{"tandem: train Keras-style models on one device or many"};
  app.require_subcommand(1);
  app.fallthrough(false);
  tandem::cli::add_fit(app);
  tandem::cli::add_evaluate(app);
  tandem::cli::add_predict(app);
  tandem::cli::add_summary(app);
  tandem::cli::add_datasets(app);
  tandem::cli::add_keys(app);
  tandem::cli::add_compare(app);
  app.add_subcommand("launch",
                     "start a command on several processes or machines through mpirun (tandem launch --help)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
