#include "experiments/bench_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fc::experiments {
namespace {

std::string cell_value(double ours, double theirs, bool ratio, const char* mark = "") {
  char text[32] = "-";
  if (std::isnan(ours) || (ratio && std::isnan(theirs))) return text;
  std::snprintf(text, sizeof text, ratio ? "%.2fx%s" : "%.3f%s", ratio ? theirs / ours : ours, mark);
  return text;
}

std::string padded(const char* format, const std::string& text) {
  char line[96];
  std::snprintf(line, sizeof line, format, text.c_str());
  return line;
}

}  // namespace

std::string bench_side_by_side(const std::vector<std::string>& row_order, const std::map<std::string, BenchRow>& table,
                               const std::vector<std::string>& subjects, const std::string& baseline, const std::string& records,
                               const std::map<std::string, std::string>& reference_rows, const std::string& reference_note) {
  const bool have_baseline = std::find(subjects.begin(), subjects.end(), baseline) != subjects.end();
  std::string out = padded("%-40s", have_baseline ? "speed / baseline (fwd | bwd | fwd+bwd)" : "median ms (fwd | bwd | fwd+bwd)");
  for (const std::string& name : subjects) out += padded(" %24s", name);
  out += "\n";
  bool referenced = false;
  const BenchRow empty_row;
  const auto row_of = [&](const std::string& key) -> const BenchRow& {
    const auto found = table.find(key);
    return found == table.end() ? empty_row : found->second;
  };
  const auto point_of = [&](const BenchRow& row, const std::string& name) -> const BenchPoint* {
    const auto found = row.find(name);
    return found == row.end() ? nullptr : &found->second;
  };
  for (const std::string& key : row_order) {
    const BenchRow& row = row_of(key);
    out += padded("%-40s", key);
    const BenchPoint* base = point_of(row, baseline);
    const char* mark = "";
    if (base == nullptr && have_baseline) {  // (the baseline does not run this row's format: its reference row's)
      const auto reference = reference_rows.find(key);
      if (reference != reference_rows.end()) {
        base = point_of(row_of(reference->second), baseline);
        if (base != nullptr) mark = "*";
      }
    }
    const bool base_ok = base != nullptr && base->error.empty();
    for (const std::string& name : subjects) {
      const BenchPoint* p = point_of(row, name);
      if (p == nullptr || !p->error.empty() || (have_baseline && !base_ok)) {
        out += padded(" %24s", "-");
        continue;
      }
      const BenchPoint none;
      const BenchPoint& b = have_baseline ? *base : none;
      const std::string fwd = cell_value(p->fwd_ms, b.fwd_ms, have_baseline, mark), bwd = cell_value(p->bwd_ms, b.bwd_ms, have_baseline, mark),
                        both = cell_value(p->fwd_ms + p->bwd_ms, b.fwd_ms + b.bwd_ms, have_baseline, mark);
      if (*mark && (fwd != "-" || bwd != "-")) referenced = true;  // (a marked number printed: the legend explains it)
      out += padded(" %24s", fwd + " | " + bwd + " | " + both);
    }
    out += "\n";
  }
  out += have_baseline ? "(cells: speed relative to " + baseline + " in this run; records: " + records + ")\n"
                       : "(cells: median ms; " + baseline + " was not timed in this run; records: " + records + ")\n";
  if (referenced) {
    out += "(*: " + baseline + " has no time in that row's format; the ratio is against its time on the row's reference row" +
           (reference_note.empty() ? "" : ", " + reference_note) + ")\n";
  }
  return out;
}

std::vector<std::size_t> bench_round_order(std::size_t subjects, int round) {
  std::vector<std::size_t> order(subjects);
  for (std::size_t i = 0; i < subjects; ++i) order[i] = round % 2 == 0 ? i : subjects - 1 - i;
  return order;
}

double bench_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n == 0 ? NAN : n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void BenchDeviceState::add_round(const std::vector<double>& clocks, const std::vector<double>& powers, const std::vector<std::string>& round_limits,
                                 const std::string& round_note) {
  clocks_mhz.insert(clocks_mhz.end(), clocks.begin(), clocks.end());
  powers_w.insert(powers_w.end(), powers.begin(), powers.end());
  round_clocks_mhz.push_back(bench_median(clocks));
  round_powers_w.push_back(bench_median(powers));
  limits.insert(limits.end(), round_limits.begin(), round_limits.end());
  std::sort(limits.begin(), limits.end());
  limits.erase(std::unique(limits.begin(), limits.end()), limits.end());
  if (note.empty()) note = round_note;
}

std::string BenchDeviceState::text() const {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  char number[32];
  if (!clocks_mhz.empty()) std::snprintf(number, sizeof number, "%.0f MHz", sm_clock_mhz()), add(number);
  if (!powers_w.empty()) std::snprintf(number, sizeof number, "%.0f W", power_w()), add(number);
  for (const std::string& l : limits) add(l);
  return out;
}

}  // namespace fc::experiments
