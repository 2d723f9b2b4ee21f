// The subcommands of `flashcheck`; each file registers one on the application.
#pragma once

#include <CLI/CLI.hpp>

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace fc::cli {

// Thrown by a command whose run completed but whose checks failed: exit code 1, the message on stderr.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bounds on a numeric option whose error names the bound. (CLI11's PositiveNumber and NonNegativeNumber answer 0 or -1
// with "not in range 0.000000 to 1797...", the whole of DBL_MAX written out, which reads as if the value were in range.)
inline CLI::Validator at_least(double lowest) {
  std::ostringstream written;
  written << lowest;  // (1, 0, 0.5: not to_string's 1.000000)
  const std::string bound = written.str();
  return CLI::Validator(
      [lowest, bound](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (!(value >= lowest)) return "must be at least " + bound + ", not " + text;  // (NaN fails too)
        if (value > std::numeric_limits<double>::max()) return "must be finite, not " + text;
        return {};
      },
      ">=" + bound);
}

void add_formats_command(CLI::App& app);
void add_round_command(CLI::App& app);
void add_oracle_check_command(CLI::App& app);
void add_list_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_experiment_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_bench_command(CLI::App& app);

}  // namespace fc::cli
