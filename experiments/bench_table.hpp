// `flashcheck bench`'s side-by-side table (experiments/cli/bench_command.cpp): one row per configuration
// (dtype, d, mask, N), one cell per subject holding its fwd, bwd and fwd+bwd speed relative to a baseline subject
// timed in the same run (the same FLOPs, so the ratio of rates is the inverse ratio of median times). Kept apart
// from the command so that its cells are tested without a GPU.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace fc::experiments {

// One subject's medians on one configuration; NaN where the op was not timed (the subject does not declare it).
struct BenchPoint {
  double fwd_ms = NAN, bwd_ms = NAN;
  std::string error;  // non-empty: the subject failed on this configuration
};

using BenchRow = std::map<std::string, BenchPoint>;  // subject -> point

// The table as text: a header line, a line per row of `row_order`, and a legend. Cells are "fwd | bwd |
// fwd+bwd" ratios (baseline time / subject time, "1.05x": 5 % faster), "-" for an op not timed by either side,
// and "-" for the whole cell where the subject failed or the row's baseline did. If `baseline` is not among
// `subjects`, cells are the subject's own medians in ms instead.
//
// A row whose format the baseline does not run (no baseline point in it at all: FP8 rows against cuDNN) is divided
// by the baseline of its entry in `reference_rows` instead, and its ratios are marked "*" ("1.31x*"), so that FP8
// and 16-bit kernels read against the same clock; the legend then says so, with `reference_note` naming the rows
// (bench: "the bf16 row of the same shape").
std::string bench_side_by_side(const std::vector<std::string>& row_order, const std::map<std::string, BenchRow>& table,
                               const std::vector<std::string>& subjects, const std::string& baseline, const std::string& records,
                               const std::map<std::string, std::string>& reference_rows = {}, const std::string& reference_note = "");

// The order in which round `round` (from 0) times `subjects` subjects: as given in even rounds, reversed in odd ones,
// so that over two rounds each subject is timed once early and once late in the point (bench --rounds).
std::vector<std::size_t> bench_round_order(std::size_t subjects, int round);

// The median of `values` (the mean of the middle two for an even count); NaN for none.
double bench_median(std::vector<double> values);

// The device's state over one subject's rounds of one op, pooled from each round's kernels::Timing (sm_clock_mhz,
// power_w, clock_limits, device_state_note; kernels/cuda/device_monitor.hpp says what a reading means).
struct BenchDeviceState {
  std::vector<double> clocks_mhz, powers_w;  // every timed run's readings, over the rounds
  // Each round's own median, in the order the rounds ran (NaN for a round that read none): a round slower than the
  // others can then be told apart as a lower clock (the power limiter's) or fewer clocks' work at the same clock
  std::vector<double> round_clocks_mhz, round_powers_w;
  std::vector<std::string> limits;                           // the clock-limit reasons any round saw, sorted, each once
  std::string note;                                          // why a reading is missing (the first round that lacked one)

  void add_round(const std::vector<double>& clocks, const std::vector<double>& powers, const std::vector<std::string>& round_limits,
                 const std::string& round_note);
  double sm_clock_mhz() const { return bench_median(clocks_mhz); }   // NaN for none
  double power_w() const { return bench_median(powers_w); }          // NaN for none
  // For the bench's point lines: "1725 MHz, 690 W, power cap", the parts that were read; "" for none.
  std::string text() const;
};

}  // namespace fc::experiments
