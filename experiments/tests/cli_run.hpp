// Running the flashcheck binary from a test: its exit code and everything it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace fc::cli_test {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr together
};

inline CliRun flashcheck(const std::string& args) {
  const std::string command = std::string(FLASHCHECK_BIN) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A path under the temporary directory that does not exist yet (removed if it did).
inline std::filesystem::path fresh_temp_path(const std::string& name) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / ("flashcheck_test_" + name);
  std::filesystem::remove_all(p);
  return p;
}

inline bool contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

}  // namespace fc::cli_test
