// `flashcheck list`: every subject with its ops, formats and limits.
#include <cstdio>
#include <memory>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/registry_options.hpp"
#include "kernels/builtin_subjects.hpp"

namespace fc::cli {

void add_list_command(CLI::App& app) {
  auto plugins = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("list", "List the subjects: ops, formats, head dims, masks, GQA, determinism");
  add_plugin_option(cmd, *plugins);
  cmd->callback([plugins] {
    std::fputs(gradcheck::format_subject_table(make_registry(*plugins)).c_str(), stdout);
    for (const std::string& note : kernels::unavailable_builtin_subjects()) std::printf("(not listed: %s)\n", note.c_str());
  });
}

}  // namespace fc::cli
