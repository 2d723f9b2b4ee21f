// The subject registry: the built-in subjects (kernels/builtin_subjects.cpp) and those loaded from
// plugins. The harness reaches every kernel through it; `flashcheck list` prints it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/attention_call.hpp"

namespace fc::gradcheck {

class Registry {
 public:
  // The built-in subjects.
  static Registry with_builtins();

  // Throws std::invalid_argument if a subject of that name exists already.
  void add(std::unique_ptr<kernels::Subject> subject);
  // Loads plugin.<name> subjects from a shared library; throws PluginError.
  void load_plugin(const std::string& path);

  kernels::Subject* find(std::string_view name) const;
  std::vector<kernels::Subject*> subjects() const;
  bool is_builtin(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<kernels::Subject>> subjects_;
  std::vector<std::string> builtin_names_;
  std::vector<std::shared_ptr<void>> libraries_;
};

// The registry as a table (`flashcheck list`): name, family, ops, formats, head dims, masks, GQA,
// determinism, description.
std::string format_subject_table(const Registry& registry);

}  // namespace fc::gradcheck
