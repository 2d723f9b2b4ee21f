// flashcheck: the command line. Exit codes: 0 success, 1 a failed run or check, 2 bad usage or input.
#include <cstdio>
#include <exception>
#include <stdexcept>

#include "experiments/build_info.hpp"
#include "experiments/cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "flashcheck: gradient checking, precision experiments and error/memory reports for\n"
      "FlashAttention-family kernels, against a high-precision oracle.",
      "flashcheck"};
  app.set_version_flag("--version", fc::experiments::describe_build());
  app.require_subcommand(0, 1);
  fc::cli::add_formats_command(app);
  fc::cli::add_round_command(app);
  fc::cli::add_oracle_check_command(app);
  fc::cli::add_list_command(app);
  fc::cli::add_check_command(app);
  fc::cli::add_experiment_command(app);
  fc::cli::add_report_command(app);
  fc::cli::add_bench_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, version or the parse error
    return code == 0 ? 0 : 2;
  } catch (const std::invalid_argument& e) {
    std::fflush(stdout);  // the report so far first, then the error after it
    std::fprintf(stderr, "flashcheck: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "flashcheck: error: %s\n", e.what());
    return 1;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 1;
  }
  return 0;
}
