// `flashcheck report` end to end, at test scale: the experiments' records, the Python renderer, an
// index.html whose figures exist and are PNGs; an existing report is never overwritten unasked; a
// report drawn from records alone; a broken record file named in a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "experiments/tests/cli_run.hpp"

namespace {

namespace fs = std::filesystem;
using fc::cli_test::CliRun;
using fc::cli_test::contains;
using fc::cli_test::flashcheck;

fs::path fresh_dir(const std::string& name) { return fc::cli_test::fresh_temp_path("report_" + name); }

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The figures index.html embeds; each must be a PNG file beside it.
int embedded_figures(const fs::path& report) {
  const std::string html = read(report / "index.html");
  const std::regex img(R"re(<img src="([^"]+)")re");
  int n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), img); it != std::sregex_iterator(); ++it, ++n) {
    const fs::path figure = report / (*it)[1].str();
    EXPECT_TRUE(fs::exists(figure)) << figure;
    EXPECT_EQ(read(figure).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << figure;
  }
  return n;
}

TEST(ReportCli, DrawsAnIndexWithAFigurePerExperimentAndNeverOverwritesIt) {
  const fs::path out = fresh_dir("main");
  const CliRun r = flashcheck("report --scale test --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "report: " + (out / "index.html").string())) << r.output;
  EXPECT_GE(embedded_figures(out), 7) << "error-vs-seqlen (3), flatness, outliers, rounding, rescale, memory, gradcheck matrix";
  const std::string html = read(out / "index.html");
  for (const char* what : {"commit", "device", "seed", "oracle precision", "rho", "error floor", "shards"}) {
    EXPECT_TRUE(contains(html, what)) << what;
  }
  EXPECT_TRUE(fs::exists(out / "summary.md"));
  EXPECT_TRUE(fs::exists(out / "records" / "run.jsonl"));

  const auto before = fs::last_write_time(out / "index.html");
  const CliRun again = flashcheck("report --scale test --out " + out.string());
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_TRUE(contains(again.output, "--overwrite")) << again.output;
  EXPECT_EQ(fs::last_write_time(out / "index.html"), before);

  // the records alone (the concatenated shards of a cluster run, say) draw the same report
  const fs::path redraw = fresh_dir("redraw");
  const CliRun from_records = flashcheck("report --records " + (out / "records").string() + " --out " + redraw.string());
  ASSERT_EQ(from_records.exit_code, 0) << from_records.output;
  EXPECT_EQ(embedded_figures(redraw), embedded_figures(out));
  fs::remove_all(out);
  fs::remove_all(redraw);
}

TEST(ReportCli, ABrokenRecordFileIsNamedAndFailsTheReport) {
  const fs::path records = fresh_dir("broken_records"), out = fresh_dir("broken_out");
  fs::create_directories(records);
  std::ofstream(records / "bad.jsonl") << "{\"schema\": 1, \"kind\": \"experiment\"\nnot json\n";
  const CliRun r = flashcheck("report --records " + records.string() + " --out " + out.string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "bad.jsonl:1")) << r.output;
  EXPECT_TRUE(contains(r.output, "drawing the report failed")) << r.output;
  fs::remove_all(records);
  fs::remove_all(out);
}

}  // namespace
