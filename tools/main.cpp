// pagoda: the command-line entry point (composition root: flags and environment are read
// here and nowhere below).
#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  pagoda::SteadyClock clock;
  pagoda::Logger logger(pagoda::LogLevel::kInfo, stderr);
  CLI::App app{"Pagoda: an LLM inference engine built around its KV cache"};
  app.require_subcommand(1);
  int exit_code = 0;
  pagoda::tools::register_run(app, clock, logger, exit_code);
  pagoda::tools::register_bench(app, clock, logger, exit_code);
  pagoda::tools::register_bench_serve(app, clock, exit_code);
  pagoda::tools::register_info(app, exit_code);
  pagoda::tools::register_tokenize(app, exit_code);
  pagoda::tools::register_make_model(app, exit_code);
  pagoda::tools::register_convert(app, exit_code);
  pagoda::tools::register_kvcalc(app, exit_code);
  pagoda::tools::register_perplexity(app, clock, logger, exit_code);
  pagoda::tools::register_serve(app, clock, logger, exit_code);
  pagoda::tools::register_router(app, clock, logger, exit_code);
  pagoda::tools::register_explain(app, exit_code);
  pagoda::tools::register_replay(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
