// The built-in subjects: every kernel flashcheck ships. Adding a kernel is one line in
// builtin_subjects.cpp; the harness, `flashcheck list` and every check then cover it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/attention_call.hpp"

namespace fc::kernels {

std::vector<std::unique_ptr<Subject>> make_builtin_subjects();

// Built-in subjects this build or machine cannot offer, each with the reason ("cuda.*: no CUDA device
// present"), for `flashcheck list`.
std::vector<std::string> unavailable_builtin_subjects();

}  // namespace fc::kernels
