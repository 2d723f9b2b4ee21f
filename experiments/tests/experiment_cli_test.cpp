// `flashcheck experiment` and `flashcheck check --shard` as a user meets them: the list, records on
// disk, shards that add up to the whole run, usage errors with exit code 2, and output that is never
// overwritten unasked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/tests/cli_run.hpp"

namespace {

namespace fs = std::filesystem;
using fc::cli_test::CliRun;
using fc::cli_test::contains;
using fc::cli_test::flashcheck;

fs::path fresh_dir(const std::string& name) { return fc::cli_test::fresh_temp_path("experiment_" + name); }

// What a record measured, without when, how long and which shard: nothing else may differ.
void drop_timing(nlohmann::json& j) {
  if (!j.is_object()) return;
  j.erase("time");
  j.erase("seconds");
  j.erase("shard");
  for (auto& [key, value] : j.items()) drop_timing(value);
}

// Every experiment record under `dir` (run.jsonl excluded), as canonical text.
std::multiset<std::string> measured(const fs::path& dir) {
  std::multiset<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename() == "run.jsonl" || entry.path().filename().string().rfind("run.", 0) == 0) continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      EXPECT_EQ(j.at("kind"), "experiment") << entry.path();
      drop_timing(j);
      out.insert(j.dump());
    }
  }
  return out;
}

TEST(ExperimentCli, ListNamesEveryExperiment) {
  const CliRun r = flashcheck("experiment --list");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"error-vs-seqlen", "error-vs-flatness", "error-vs-outliers", "rounding", "rescale", "memory-scaling", "gradcheck-matrix"}) {
    EXPECT_TRUE(contains(r.output, name)) << name << "\n" << r.output;
  }
}

TEST(ExperimentCli, WritesRecordsAndARunRecordAndNeverOverwritesUnasked) {
  const fs::path dir = fresh_dir("records");
  const std::string args = "experiment error-vs-seqlen rescale --scale test --subjects cpu.fa2,cpu.fa4 --out " + dir.string();
  const CliRun r = flashcheck(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(dir / "error-vs-seqlen.jsonl")) << r.output;
  ASSERT_TRUE(fs::exists(dir / "rescale.jsonl")) << r.output;
  std::ifstream in(dir / "error-vs-seqlen.jsonl");
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    for (const char* key : {"schema", "subject", "op", "policy", "shape", "mask", "seed", "tensors", "verdict", "oracle", "device", "commit", "time", "x"}) {
      EXPECT_TRUE(j.contains(key)) << key << ": " << line;
    }
    EXPECT_TRUE(j.at("subject") == "cpu.fa2" || j.at("subject") == "cpu.fa4") << line;
    EXPECT_TRUE(j.at("tensors").begin()->at("subject").contains("reference_rms")) << line;
  }
  EXPECT_GT(lines, 0);
  std::ifstream run_in(dir / "run.jsonl");
  std::string run_line;
  ASSERT_TRUE(static_cast<bool>(std::getline(run_in, run_line)));
  const auto run = nlohmann::json::parse(run_line);
  EXPECT_EQ(run.at("kind"), "run");
  EXPECT_EQ(run.at("scale"), "test");
  EXPECT_EQ(run.at("shard"), "0/1");
  const auto before = fs::last_write_time(dir / "rescale.jsonl");
  const CliRun again = flashcheck(args);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_TRUE(contains(again.output, "--overwrite")) << again.output;
  EXPECT_EQ(fs::last_write_time(dir / "rescale.jsonl"), before) << "refused, yet the file changed";
  EXPECT_EQ(flashcheck(args + " --overwrite").exit_code, 0);
  fs::remove_all(dir);
}

// Shards own the work items i with i mod N = I of one fixed order: run as 3 shards, the records are
// exactly those of the unsharded run (up to timings), and no item runs twice.
TEST(ExperimentCli, ShardsAddUpToTheWholeRun) {
  const std::string what = "experiment error-vs-seqlen gradcheck-matrix --scale test --subjects cpu.naive,cpu.hog ";
  const fs::path whole = fresh_dir("whole");
  ASSERT_EQ(flashcheck(what + "--out " + whole.string()).exit_code, 0);
  std::multiset<std::string> shards;
  std::set<std::string> shard_files;
  const fs::path split = fresh_dir("split");
  for (int i = 0; i < 3; ++i) {
    const CliRun r = flashcheck(what + "--shard " + std::to_string(i) + "/3 --out " + split.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  for (const auto& entry : fs::directory_iterator(split)) shard_files.insert(entry.path().filename().string());
  EXPECT_TRUE(shard_files.count("error-vs-seqlen.shard-0-of-3.jsonl") && shard_files.count("error-vs-seqlen.shard-2-of-3.jsonl"));
  const std::multiset<std::string> all = measured(whole), parts = measured(split);
  EXPECT_GT(all.size(), 10u);
  EXPECT_EQ(parts.size(), all.size()) << "an item ran twice or not at all";
  EXPECT_TRUE(parts == all) << "the shards measured something else than the whole run";
  fs::remove_all(whole);
  fs::remove_all(split);
}

TEST(ExperimentCli, UsageErrorsExitWith2AndSayWhy) {
  const fs::path dir = fresh_dir("usage");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"experiment no-such-experiment --out " + dir.string(), "no-such-experiment"},
      {"experiment rounding --shard 3/3 --out " + dir.string(), "--shard"},
      {"experiment rounding --shard x --out " + dir.string(), "--shard"},
      {"experiment rescale --subjects cpu.nope --out " + dir.string(), "cpu.nope"},
      {"experiment rounding --scale huge --out " + dir.string(), "huge"},
      {"experiment", "experiment"},
      {"check --subject cpu.naive --shard 2/2", "--shard"},
  };
  for (const auto& [args, says] : cases) {
    const CliRun r = flashcheck(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, says)) << args << "\n" << r.output;
  }
  fs::remove_all(dir);
}

// check --shard I/N checks the generated cases i with i mod N = I: two halves are the whole run.
TEST(ExperimentCli, CheckShardsSplitTheGeneratedCases) {
  const fs::path dir = fresh_dir("check");
  fs::create_directories(dir);
  const std::string what = "check --subject cpu.fa2 --op fwd --dtype fp16 --cases 7 --no-corpus ";
  ASSERT_EQ(flashcheck(what + "--json " + (dir / "whole.jsonl").string()).exit_code, 0);
  const CliRun first = flashcheck(what + "--shard 0/2 --json " + (dir / "a.jsonl").string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(contains(first.output, "shard 0/2")) << first.output;
  EXPECT_TRUE(contains(first.output, "4 of 4 cases passed")) << first.output;
  ASSERT_EQ(flashcheck(what + "--shard 1/2 --json " + (dir / "b.jsonl").string()).exit_code, 0);
  const auto cases_in = [](const fs::path& p) {
    std::multiset<std::string> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) out.insert(nlohmann::json::parse(line).at("case").get<std::string>());
    return out;
  };
  std::multiset<std::string> halves = cases_in(dir / "a.jsonl");
  for (const auto& c : cases_in(dir / "b.jsonl")) halves.insert(c);
  EXPECT_EQ(cases_in(dir / "whole.jsonl").size(), 7u);
  EXPECT_TRUE(halves == cases_in(dir / "whole.jsonl"));
  fs::remove_all(dir);
}

}  // namespace
