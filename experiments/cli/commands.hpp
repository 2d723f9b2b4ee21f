// The subcommands of `flashcheck`; each file registers one on the application.
#pragma once

#include <CLI/CLI.hpp>

namespace fc::cli {

void add_formats_command(CLI::App& app);
void add_round_command(CLI::App& app);

}  // namespace fc::cli
