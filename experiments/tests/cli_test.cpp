// The command line as a user meets it: exit codes, messages, and the numbers it prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "experiments/build_info.hpp"
#include "experiments/tests/cli_run.hpp"

namespace {

using fc::cli_test::CliRun;
using fc::cli_test::contains;
using fc::cli_test::flashcheck;

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
  const CliRun fmt = flashcheck("round 1 --to fp4");
  EXPECT_EQ(fmt.exit_code, 2);
  EXPECT_TRUE(contains(fmt.output, "unknown format 'fp4'")) << fmt.output;
  const CliRun wide = flashcheck("round 1 --to fp64");
  EXPECT_EQ(wide.exit_code, 2);
  EXPECT_TRUE(contains(wide.output, "not narrower")) << wide.output;
  const CliRun unknown = flashcheck("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

TEST(Cli, OracleCheckPrintsEveryFigureAndEndsWithTheSummary) {
  const CliRun r = flashcheck("oracle-check --cases 3 --seed 11");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* check : {"backward: analytic vs autodiff", "backward: analytic vs finite differences",
                            "double backward: analytic vs autodiff", "double backward: analytic vs finite differences",
                            "forward O vs mp50", "AttnRes: two-phase vs one-softmax", "AttnRes backward: analytic vs autodiff"}) {
    EXPECT_TRUE(contains(r.output, check)) << check;
  }
  EXPECT_TRUE(contains(last_line(r.output), "oracle-check: PASS: 26 of 26 checks hold over 6 cases")) << last_line(r.output);
}

TEST(Cli, OracleCheckTakesExplicitCasesAndRejectsBadOnes) {
  const CliRun ok = flashcheck("oracle-check --cases 0 --case 'B=1 Hq=2 Hkv=1 Nq=3 Nk=5 d=4 dv=2 mask=causal_br scale=0.5 seed=7'"
                               " --attnres-case 'N=3 B=1 T=2 D=8 S=2 eps=1e-6 seed=7'");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(contains(last_line(ok.output), "over 2 cases")) << ok.output;
  const CliRun bad = flashcheck("oracle-check --cases 0 --case 'B=1 Hq=3 Hkv=2 Nq=1 Nk=1 d=1 dv=1'");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "not a multiple of Hkv")) << bad.output;
  const CliRun empty = flashcheck("oracle-check --cases 0");
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
}

std::string plugin(const char* name) { return std::string(FLASHCHECK_PLUGIN_DIR) + "/lib" + name + ".so"; }

TEST(Cli, ListShowsTheSubjectsAndPlugins) {
  const CliRun r = flashcheck("list");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "cpu.naive")) << r.output;
  EXPECT_TRUE(contains(r.output, "fwd,bwd,bwdbwd")) << r.output;
  const CliRun p = flashcheck("list --plugin " + plugin("flashcheck_example_plugin"));
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_TRUE(contains(p.output, "plugin.example")) << p.output;
}

TEST(Cli, CheckPrintsTheTableAndPasses) {
  const CliRun r = flashcheck("check --subject cpu.naive --op fwd --dtype bf16,fp32 --cases 20 --no-corpus");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "worst err/base")) << r.output;
  EXPECT_TRUE(contains(r.output, "rho = 2")) << r.output;
  EXPECT_TRUE(contains(last_line(r.output), "check: PASS: 40 of 40 cases passed")) << r.output;
}

TEST(Cli, CheckUsageErrorsExitWith2) {
  EXPECT_EQ(flashcheck("check --subject cpu.nope").exit_code, 2);
  EXPECT_TRUE(contains(flashcheck("check --subject cpu.nope").output, "no subject 'cpu.nope'"));
  EXPECT_EQ(flashcheck("check --subject cpu.naive --dtype fp4").exit_code, 2);
  EXPECT_EQ(flashcheck("check --subject cpu.naive --op sideways").exit_code, 2);
  const CliRun missing = flashcheck("check --subject cpu.naive --plugin /nonexistent/libx.so");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.output, "no such file")) << missing.output;
  const CliRun version = flashcheck("list --plugin " + plugin("flashcheck_test_plugin_wrong_version"));
  EXPECT_EQ(version.exit_code, 2);
  EXPECT_TRUE(contains(version.output, "ABI version 999")) << version.output;
  const CliRun unsupported = flashcheck("check --subject plugin.example --dtype bf16 --plugin " + plugin("flashcheck_example_plugin"));
  EXPECT_EQ(unsupported.exit_code, 2);
  EXPECT_TRUE(contains(unsupported.output, "does not support format bf16")) << unsupported.output;
  // a case or policy outside the subject's declared support is a usage error, not a failure
  const CliRun big = flashcheck("check --subject cpu.naive --case 'B=1 Hq=1 Hkv=1 Nq=4 Nk=4 d=300 dv=8'");
  EXPECT_EQ(big.exit_code, 2) << big.output;
  EXPECT_TRUE(contains(big.output, "unsupported head dim d = 300")) << big.output;
  const CliRun acc = flashcheck("check --subject cpu.naive --policy bf16,acc=bf16 --cases 2");
  EXPECT_EQ(acc.exit_code, 2) << acc.output;
  EXPECT_TRUE(contains(acc.output, "does not accumulate in bf16")) << acc.output;
  for (const char* field : {"scale=inf", "scale=nan", "seed=-1", "inputs=normal:inf", "scale=0.5x"}) {
    const CliRun bad = flashcheck(std::string("check --subject cpu.naive --case 'B=1 Hq=1 Hkv=1 Nq=4 Nk=4 d=8 dv=8 ") + field + "'");
    EXPECT_EQ(bad.exit_code, 2) << field << "\n" << bad.output;
    EXPECT_TRUE(contains(bad.output, field)) << bad.output;
  }
}

// A numeric option out of its bounds names the bound (CLI11's own checks printed DBL_MAX in full).
TEST(Cli, OutOfBoundsNumbersNameTheBound) {
  const struct {
    const char* args;
    const char* message;
  } refused[] = {
      {"check --subject cpu.naive --cases 0", "--cases: must be at least 1, not 0"},
      {"check --subject cpu.naive --max-seq -3", "must be at least 1, not -3"},
      {"check --subject cpu.naive --max-head-dim 0", "--max-head-dim: must be at least 1, not 0"},
      {"bench --preheat nan", "must be at least 0, not nan"},
      {"bench --repeats many", "'many' is not a number"},
      {"bench --rounds 0", "--rounds: must be at least 1, not 0"},
      {"bench --warmup-seconds -1", "--warmup-seconds: must be at least 0, not -1"},
      {"oracle-check --cases -1", "must be at least 0, not -1"},
  };
  for (const auto& r : refused) {
    const CliRun run = flashcheck(r.args);
    EXPECT_EQ(run.exit_code, 2) << r.args << "\n" << run.output;
    EXPECT_TRUE(contains(run.output, r.message)) << r.args << "\n" << run.output;
    EXPECT_FALSE(contains(run.output, "179769")) << r.args << "\n" << run.output;
  }
}

// A bench in which no subject could time any point (here a CPU subject: it cannot be timed on a device) prints each
// point's error and fails, rather than exiting 0 with an empty table.
TEST(Cli, ABenchThatTimedNothingFails) {
  const CliRun run = flashcheck("bench --subjects cpu.fa2 --d 64 --n 128 --mask none --dtype bf16 --preheat 0 --warmup 1 --repeats 1 --rounds 1 "
                                "--out /tmp/flashcheck_cli_test_bench --overwrite");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(contains(run.output, "cannot be timed on a device")) << run.output;
  EXPECT_TRUE(contains(run.output, "nothing was timed")) << run.output;
}

// A built-in subject held to an impossible standard (the baseline's error exactly, no floor) fails;
// the failure goes to the --corpus file, and the reproduce command carries the verdict's parameters.
TEST(Cli, AFailureOfABuiltInSubjectGoesToTheCorpusWithItsVerdictParameters) {
  const std::string path = "/tmp/flashcheck_cli_test_corpus.txt";
  std::remove(path.c_str());
  const CliRun r = flashcheck("check --subject cpu.fa2 --op bwd --dtype fp32 --cases 50 --rho 1 --floor-u 0 --corpus " + path);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--rho 1 --floor-u 0")) << r.output;
  EXPECT_TRUE(contains(r.output, "added to the regression corpus " + path)) << r.output;
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  EXPECT_EQ(last.rfind("cpu.fa2 bwd B=", 0), 0u) << last;
  std::remove(path.c_str());
}

// A failing subject: exit 1, the shrunk case, one command that reproduces it. A plugin's failure is
// not added to the repository's corpus (the tests could not re-run it without the plugin).
TEST(Cli, AFailureIsShrunkAndReproducible) {
  const CliRun r = flashcheck("check --subject plugin.wrong --op fwd --dtype fp32 --cases 30 --plugin " + plugin("flashcheck_wrong_plugin"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "FAIL fwd fp32")) << r.output;
  EXPECT_TRUE(contains(r.output, "reproduce: flashcheck check --subject plugin.wrong --op fwd --case \"")) << r.output;
  EXPECT_FALSE(contains(r.output, "added to the regression corpus")) << r.output;
  const auto at = r.output.find("--case \"");
  const std::string case_text = r.output.substr(at + 8, r.output.find('"', at + 8) - at - 8);
  const CliRun again = flashcheck("check --subject plugin.wrong --op fwd --case \"" + case_text + "\" --plugin " + plugin("flashcheck_wrong_plugin"));
  EXPECT_EQ(again.exit_code, 1) << "the reproduce command fails the same way\n" << again.output;
}

TEST(Cli, CheckWritesJsonLinesRecordsAndNeverOverwritesUnasked) {
  const std::string path = "/tmp/flashcheck_cli_test_records.jsonl";
  std::remove(path.c_str());
  const CliRun r = flashcheck("check --subject cpu.naive --op bwd --dtype fp16 --cases 5 --no-corpus --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(path);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("schema"), 1);
    EXPECT_EQ(j.at("kind"), "check");
    EXPECT_EQ(j.at("subject"), "cpu.naive");
    EXPECT_EQ(j.at("op"), "bwd");
    EXPECT_EQ(j.at("policy"), "fp16");
    EXPECT_EQ(j.at("oracle"), "fp64");
    EXPECT_EQ(j.at("verdict"), "pass");
    for (const char* key : {"shape", "mask", "seed", "tensors", "properties", "device", "commit", "time", "rho", "floor_u"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_TRUE(j.at("tensors").contains("dQ"));
  }
  EXPECT_EQ(lines, 5);
  const CliRun again = flashcheck("check --subject cpu.naive --op bwd --dtype fp16 --cases 5 --no-corpus --json " + path);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_TRUE(contains(again.output, "--overwrite")) << again.output;
  EXPECT_EQ(flashcheck("check --subject cpu.naive --op bwd --dtype fp16 --cases 5 --no-corpus --overwrite --json " + path).exit_code, 0);
  std::remove(path.c_str());
}

TEST(Cli, CheckRunsAnExplicitCase) {
  const CliRun r = flashcheck("check --subject cpu.naive --op bwdbwd --case 'B=1 Hq=2 Hkv=1 Nq=5 Nk=9 d=4 dv=4 mask=causal_tl "
                              "scale=0.5 inputs=outliers layout=bnhd policy=fp32 seed=3'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* what : {"dQ'", "dK'", "dV'", "ddO", "self-fd", "homogeneity", "additivity", "determinism"}) {
    EXPECT_TRUE(contains(r.output, what)) << what;
  }
}

// AttnRes subjects go through the same command: generated cases, explicit ones, records, usage errors.
TEST(Cli, CheckCoversAttnResSubjects) {
  const CliRun r = flashcheck("check --subject cpu.attnres --policy bf16,o=fp16 --cases 20 --no-corpus");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(last_line(r.output), "check: PASS: 40 of 40 cases passed")) << r.output;
  const CliRun one = flashcheck("check --subject cpu.attnres --op bwd --case 'N=3 B=1 T=5 D=16 S=2 eps=1e-06 inputs=normal:1048576 "
                                "policy=bf16,o=fp16,round=sr,seed=2 seed=9'");
  EXPECT_EQ(one.exit_code, 0) << one.output;
  for (const char* what : {"d_values", "d_partial", "d_queries", "zero", "homogeneity", "additivity", "determinism"}) {
    EXPECT_TRUE(contains(one.output, what)) << what << "\n" << one.output;
  }
  const CliRun big = flashcheck("check --subject cpu.attnres --case 'N=2 B=1 T=3 D=9000 S=1'");
  EXPECT_EQ(big.exit_code, 2) << big.output;
  EXPECT_TRUE(contains(big.output, "unsupported dimension D = 9000")) << big.output;
  const CliRun attention_case = flashcheck("check --subject cpu.attnres --case 'B=1 Hq=1 Hkv=1 Nq=4 Nk=4 d=8 dv=8'");
  EXPECT_EQ(attention_case.exit_code, 2) << attention_case.output;
  EXPECT_TRUE(contains(attention_case.output, "unknown key")) << attention_case.output;
  const std::string path = "/tmp/flashcheck_cli_test_attnres.jsonl";
  std::remove(path.c_str());
  const CliRun rec = flashcheck("check --subject cpu.attnres --op fwd --dtype fp16 --cases 3 --no-corpus --json " + path);
  EXPECT_EQ(rec.exit_code, 0) << rec.output;
  std::ifstream in(path);
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["family"], "attnres");
    EXPECT_TRUE(j["shape"].contains("S")) << line;
    EXPECT_TRUE(j["tensors"].contains("h")) << line;
    ++records;
  }
  EXPECT_EQ(records, 3);
}

}  // namespace
