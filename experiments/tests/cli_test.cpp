// The command line as a user meets it: exit codes, messages, and the numbers it prints.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "experiments/build_info.hpp"

namespace {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr together
};

CliRun flashcheck(const std::string& args) {
  const std::string command = std::string(FLASHCHECK_BIN) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

TEST(Cli, VersionNamesTheCommitAndConfiguration) {
  const CliRun r = flashcheck("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, fc::experiments::describe_build())) << r.output;
  EXPECT_TRUE(contains(r.output, "flashcheck 0.1.0 (commit ")) << r.output;
}

TEST(Cli, HelpListsTheSubcommands) {
  const CliRun r = flashcheck("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "formats")) << r.output;
  EXPECT_TRUE(contains(r.output, "round")) << r.output;
  const CliRun bare = flashcheck("");
  EXPECT_EQ(bare.exit_code, 1) << "no subcommand: help, and a non-zero exit";
  EXPECT_TRUE(contains(bare.output, "Subcommands")) << bare.output;
}

TEST(Cli, FormatsPrintsUnitRoundoffs) {
  const CliRun r = flashcheck("formats");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "0.00390625 (2^-8)")) << r.output;   // bf16
  EXPECT_TRUE(contains(r.output, "0.000488281 (2^-11)")) << r.output;   // fp16
  EXPECT_TRUE(contains(r.output, "65504")) << r.output;
}

TEST(Cli, RoundShowsNeighboursResultAndError) {
  const CliRun r = flashcheck("round 0.1 --to bf16");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "0.099609375 (0x3dcc) and 0.10009765625 (0x3dcd)")) << r.output;
  EXPECT_TRUE(contains(r.output, "result      0.10009765625 = 0x3dcd (bf16, rn)")) << r.output;
  // |0.10009765625 - 0.1| = 9.765625e-5 = 0.2 of bf16's spacing 2^-11 at 0.1
  EXPECT_TRUE(contains(r.output, "0.2 ulp of bf16")) << r.output;
}

TEST(Cli, RoundStochasticShowsTheWordAndProbability) {
  const CliRun r = flashcheck("round 1.3 --to fp16 --mode sr --seed 5 --index 17");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "P(away)")) << r.output;
  EXPECT_TRUE(contains(r.output, "seed 5, stream 0, element 17")) << r.output;
}

TEST(Cli, RoundOverflowAndNan) {
  const CliRun big = flashcheck("round 70000 --to fp16");
  EXPECT_EQ(big.exit_code, 0);
  EXPECT_TRUE(contains(big.output, "overflow")) << big.output;
  const CliRun nan = flashcheck("round nan --to bf16");
  EXPECT_EQ(nan.exit_code, 0);
  EXPECT_TRUE(contains(nan.output, "0x7fc0")) << nan.output;
}

TEST(Cli, BadInputGivesAClearMessageAndExitCode2) {
  const CliRun word = flashcheck("round abc --to bf16");
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_TRUE(contains(word.output, "'abc' is not a number")) << word.output;
  const CliRun fmt = flashcheck("round 1 --to fp8");
  EXPECT_EQ(fmt.exit_code, 2);
  EXPECT_TRUE(contains(fmt.output, "unknown format 'fp8'")) << fmt.output;
  const CliRun wide = flashcheck("round 1 --to fp64");
  EXPECT_EQ(wide.exit_code, 2);
  EXPECT_TRUE(contains(wide.output, "not narrower")) << wide.output;
  const CliRun unknown = flashcheck("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
}

}  // namespace
