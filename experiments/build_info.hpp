// Where and how this binary was built: every record carries it, `flashcheck --version` prints it.
#pragma once

#include <string>

namespace fc::experiments {

struct BuildInfo {
  const char* version;
  const char* commit;  // short hash, or "unknown" outside a git checkout
  bool dirty;          // tracked files differed from the commit at build time
  const char* build_type;
  const char* cxx_compiler;
  bool cuda;
  const char* cuda_version;
  const char* cuda_architectures;
  bool torch;
  const char* torch_version;
};

const BuildInfo& build_info();
// One line: "flashcheck 0.1.0 (commit abc123456789, Release, GNU-12.2.0, CUDA 13.0 [90a], no libtorch)"
std::string describe_build();

}  // namespace fc::experiments
