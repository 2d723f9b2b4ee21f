// The subcommands of `flashcheck`; each file registers one on the application.
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>

namespace fc::cli {

// Thrown by a command whose run completed but whose checks failed: exit code 1, the message on stderr.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void add_formats_command(CLI::App& app);
void add_round_command(CLI::App& app);
void add_oracle_check_command(CLI::App& app);
void add_list_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_experiment_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_bench_command(CLI::App& app);

}  // namespace fc::cli
