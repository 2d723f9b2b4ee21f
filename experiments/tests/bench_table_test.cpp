// bench's side-by-side table: ratios against the baseline, "-" for what was not timed or failed, and ms when the
// baseline is absent.
#include "experiments/bench_table.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

namespace fc::experiments {
namespace {

// The cells of a row, in subject order (the row's text after its key, split on runs of two or more spaces).
std::vector<std::string> cells_of(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(key, 0) != 0) continue;
    std::vector<std::string> cells;
    std::string rest = line.substr(40), cell;
    for (std::size_t i = 0; i < rest.size(); i += 25) {
      cell = rest.substr(i + 1, 24);
      cell.erase(0, cell.find_first_not_of(' '));
      cells.push_back(cell);
    }
    return cells;
  }
  return {};
}

TEST(BenchSideBySide, DividesEachOpsTimeIntoTheBaselinesOfTheSameRow) {
  std::map<std::string, BenchRow> table;
  table["bf16 d=128 none N=4096"]["ours"] = {1.0, 4.0, ""};
  table["bf16 d=128 none N=4096"]["base"] = {1.1, 3.6, ""};
  table["bf16 d=128 none N=4096"]["fwd_only"] = {0.5, NAN, ""};
  const std::string text = bench_side_by_side({"bf16 d=128 none N=4096"}, table, {"ours", "base", "fwd_only"}, "base", "x/bench.jsonl");
  const std::vector<std::string> cells = cells_of(text, "bf16 d=128 none N=4096");
  ASSERT_EQ(cells.size(), 3u) << text;
  EXPECT_EQ(cells[0], "1.10x | 0.90x | 0.94x") << text;  // 1.1 / 1.0, 3.6 / 4.0, 4.7 / 5.0
  EXPECT_EQ(cells[1], "1.00x | 1.00x | 1.00x") << text;
  EXPECT_EQ(cells[2], "2.20x | - | -") << text;  // no bwd: neither bwd nor fwd+bwd is a number
  EXPECT_NE(text.find("relative to base in this run"), std::string::npos) << text;
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
}

TEST(BenchSideBySide, AFailedSubjectOrAFailedBaselineLeavesADash) {
  std::map<std::string, BenchRow> table;
  table["r1"]["ours"] = {1.0, 2.0, "out of memory"};
  table["r1"]["base"] = {1.0, 2.0, ""};
  table["r2"]["ours"] = {1.0, 2.0, ""};
  table["r2"]["base"] = {1.0, 2.0, "unsupported"};
  const std::string text = bench_side_by_side({"r1", "r2"}, table, {"ours", "base"}, "base", "x");
  EXPECT_EQ(cells_of(text, "r1")[0], "-") << text;
  EXPECT_EQ(cells_of(text, "r1")[1], "1.00x | 1.00x | 1.00x") << text;
  EXPECT_EQ(cells_of(text, "r2")[0], "-") << text;
  EXPECT_EQ(cells_of(text, "r2")[1], "-") << text;
}

TEST(BenchSideBySide, WithoutTheBaselineInTheRunTheCellsAreMilliseconds) {
  std::map<std::string, BenchRow> table;
  table["r"]["ours"] = {1.25, NAN, ""};
  const std::string text = bench_side_by_side({"r"}, table, {"ours"}, "torch.sdpa.cudnn", "x");
  EXPECT_EQ(cells_of(text, "r")[0], "1.250 | - | -") << text;
  EXPECT_NE(text.find("torch.sdpa.cudnn was not timed"), std::string::npos) << text;
}

TEST(BenchSideBySide, ARowTheBaselineDoesNotRunIsReadAgainstItsReferenceRowMarked) {
  std::map<std::string, BenchRow> table;
  table["bf16 N=4096"]["bf16_kernel"] = {1.0, 2.0, ""};
  table["bf16 N=4096"]["base"] = {1.2, 2.4, ""};
  table["e4m3 N=4096"]["fp8_kernel"] = {0.8, NAN, ""};  // (the baseline did not run e4m3: no point at all)
  table["e4m3 N=8192"]["fp8_kernel"] = {3.0, NAN, ""};  // (no reference row given: dashes, no mark)
  table["e4m3 N=16384"]["fp8_kernel"] = {9.0, NAN, ""};
  table["e4m3 N=16384"]["base"] = {9.0, NAN, "unsupported"};  // (the baseline tried and failed: its row stays dashes)
  const std::map<std::string, std::string> reference{{"e4m3 N=4096", "bf16 N=4096"}, {"e4m3 N=16384", "bf16 N=4096"}};
  const std::string text = bench_side_by_side({"bf16 N=4096", "e4m3 N=4096", "e4m3 N=8192", "e4m3 N=16384"}, table,
                                              {"bf16_kernel", "fp8_kernel", "base"}, "base", "x", reference, "the bf16 row");
  EXPECT_EQ(cells_of(text, "bf16 N=4096")[0], "1.20x | 1.20x | 1.20x") << text;
  EXPECT_EQ(cells_of(text, "e4m3 N=4096")[1], "1.50x* | - | -") << text;  // 1.2 / 0.8, against bf16's baseline
  EXPECT_EQ(cells_of(text, "e4m3 N=4096")[0], "-") << text;
  EXPECT_EQ(cells_of(text, "e4m3 N=8192")[1], "-") << text;
  EXPECT_EQ(cells_of(text, "e4m3 N=16384")[1], "-") << text;
  EXPECT_NE(text.find("(*: base has no time in that row's format; the ratio is against its time on the row's reference row, the bf16 row)"),
            std::string::npos)
      << text;
}

TEST(BenchSideBySide, NoLegendForAMarkThatNoNumberCarries) {
  std::map<std::string, BenchRow> table;
  table["bf16"]["base"] = {NAN, 2.0, ""};    // (the baseline timed only bwd)
  table["e4m3"]["fwd_only"] = {1.0, NAN, ""};  // (and this subject only fwd: no ratio to print)
  const std::string text = bench_side_by_side({"bf16", "e4m3"}, table, {"fwd_only", "base"}, "base", "x", {{"e4m3", "bf16"}});
  EXPECT_EQ(cells_of(text, "e4m3")[0], "- | - | -") << text;
  EXPECT_EQ(text.find("(*:"), std::string::npos) << text;
}

TEST(BenchSideBySide, NoMarkAndNoFootnoteWhereEveryRowHasItsBaseline) {
  std::map<std::string, BenchRow> table;
  table["r"]["ours"] = {1.0, 2.0, ""};
  table["r"]["base"] = {1.0, 2.0, ""};
  const std::string text = bench_side_by_side({"r"}, table, {"ours", "base"}, "base", "x", {{"r", "other"}});
  EXPECT_EQ(cells_of(text, "r")[0], "1.00x | 1.00x | 1.00x") << text;
  EXPECT_EQ(text.find('*'), std::string::npos) << text;
}

TEST(BenchRounds, ReverseTheSubjectsEveryOtherRound) {
  EXPECT_EQ(bench_round_order(3, 0), (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(bench_round_order(3, 1), (std::vector<std::size_t>{2, 1, 0}));
  EXPECT_EQ(bench_round_order(3, 2), (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(bench_round_order(1, 1), (std::vector<std::size_t>{0}));
  EXPECT_TRUE(bench_round_order(0, 1).empty());
}

TEST(BenchRounds, TakeTheMedianOfTheRoundsMedians) {
  EXPECT_EQ(bench_median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(bench_median({4.0, 1.0, 3.0, 2.0}), 2.5);  // (an even count: the middle two's mean)
  EXPECT_EQ(bench_median({5.0}), 5.0);
  EXPECT_TRUE(std::isnan(bench_median({})));
}

TEST(BenchDeviceState, PoolsEveryRunsReadingsOverTheRounds) {
  BenchDeviceState state;
  state.add_round({1700, 1720}, {690, 700}, {"power cap"}, "");
  state.add_round({1740}, {680}, {"power cap", "thermal (software)"}, "");
  state.add_round({1730}, {}, {}, "the power read for 0 of 1 runs");
  EXPECT_EQ(state.sm_clock_mhz(), 1725);  // (the median of the four runs' clocks)
  EXPECT_EQ(state.power_w(), 690);        // (the median of the three runs' powers)
  EXPECT_EQ(state.limits, (std::vector<std::string>{"power cap", "thermal (software)"}));
  EXPECT_EQ(state.note, "the power read for 0 of 1 runs");
  EXPECT_EQ(state.text(), "1725 MHz, 690 W, power cap, thermal (software)");
}

TEST(BenchDeviceState, KeepsEachRoundsOwnMedianInTheOrderTheRoundsRan) {
  BenchDeviceState state;
  state.add_round({1700, 1720, 1600}, {690, 700}, {"power cap"}, "");
  state.add_round({1580}, {620}, {"power cap"}, "");
  state.add_round({}, {}, {}, "no clock or power readings");
  ASSERT_EQ(state.round_clocks_mhz.size(), 3u);
  ASSERT_EQ(state.round_powers_w.size(), 3u);
  EXPECT_EQ(state.round_clocks_mhz[0], 1700);  // (the first round's median of three)
  EXPECT_EQ(state.round_powers_w[0], 695);     // (of two: the middle two's mean)
  EXPECT_EQ(state.round_clocks_mhz[1], 1580);
  EXPECT_EQ(state.round_powers_w[1], 620);
  EXPECT_TRUE(std::isnan(state.round_clocks_mhz[2]));  // (a round that read nothing stays in its place, as NaN)
  EXPECT_TRUE(std::isnan(state.round_powers_w[2]));
  EXPECT_EQ(state.sm_clock_mhz(), 1650);  // (the pooled median over every run is unchanged: 1580 1600 1700 1720)
}

TEST(BenchDeviceState, ShowsOnlyWhatWasReadAndKeepsTheFirstReasonForWhatWasNot) {
  BenchDeviceState none;
  none.add_round({}, {}, {}, "no clock or power readings: no CUDA device (cudaErrorNoDevice)");
  none.add_round({}, {}, {}, "another reason");
  EXPECT_EQ(none.text(), "");
  EXPECT_TRUE(std::isnan(none.sm_clock_mhz()));
  EXPECT_TRUE(std::isnan(none.power_w()));
  EXPECT_EQ(none.note, "no clock or power readings: no CUDA device (cudaErrorNoDevice)");

  BenchDeviceState clocks_only;  // (a driver without the instantaneous power field: the clock alone)
  clocks_only.add_round({1755}, {}, {}, "the power read for 0 of 1 runs");
  EXPECT_EQ(clocks_only.text(), "1755 MHz");
}

}  // namespace
}  // namespace fc::experiments
