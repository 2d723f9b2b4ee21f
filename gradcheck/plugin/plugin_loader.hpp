// Loading subjects from a plugin (plugin/flashcheck_plugin.h). Every way a plugin can be wrong --
// no such file, not a shared library, missing symbols, another ABI version, an error from its
// subjects() function, a malformed subject -- becomes a PluginError with a message naming the file
// and the problem; the harness never crashes on one (a plugin that crashes inside its own code
// cannot be contained in-process).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"

namespace fc::gradcheck {

struct PluginError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct LoadedPlugin {
  std::shared_ptr<void> library;  // keeps the library loaded while its subjects live
  std::vector<std::unique_ptr<kernels::Subject>> subjects;  // named plugin.<name>
};

LoadedPlugin load_plugin_file(const std::string& path);

}  // namespace fc::gradcheck
