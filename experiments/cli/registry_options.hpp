// `--plugin PATH` (repeatable), shared by the commands that use the subject registry.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "gradcheck/registry.hpp"

namespace fc::cli {

inline void add_plugin_option(CLI::App* cmd, std::vector<std::string>& plugins) {
  cmd->add_option("--plugin", plugins, "A shared library of subjects (gradcheck/plugin/flashcheck_plugin.h); repeatable");
}

// The built-in subjects plus those of each plugin; throws gradcheck::PluginError (exit 2).
inline gradcheck::Registry make_registry(const std::vector<std::string>& plugins) {
  gradcheck::Registry r = gradcheck::Registry::with_builtins();
  for (const std::string& p : plugins) r.load_plugin(p);
  return r;
}

}  // namespace fc::cli
