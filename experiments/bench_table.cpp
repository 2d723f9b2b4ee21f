#include "experiments/bench_table.hpp"

#include <algorithm>
#include <cstdio>

namespace fc::experiments {
namespace {

std::string cell_value(double ours, double theirs, bool ratio) {
  char text[32] = "-";
  if (std::isnan(ours) || (ratio && std::isnan(theirs))) return text;
  std::snprintf(text, sizeof text, ratio ? "%.2fx" : "%.3f", ratio ? theirs / ours : ours);
  return text;
}

std::string padded(const char* format, const std::string& text) {
  char line[96];
  std::snprintf(line, sizeof line, format, text.c_str());
  return line;
}

}  // namespace

std::string bench_side_by_side(const std::vector<std::string>& row_order, const std::map<std::string, BenchRow>& table,
                               const std::vector<std::string>& subjects, const std::string& baseline, const std::string& records) {
  const bool have_baseline = std::find(subjects.begin(), subjects.end(), baseline) != subjects.end();
  std::string out = padded("%-40s", have_baseline ? "speed / baseline (fwd | bwd | fwd+bwd)" : "median ms (fwd | bwd | fwd+bwd)");
  for (const std::string& name : subjects) out += padded(" %24s", name);
  out += "\n";
  for (const std::string& key : row_order) {
    const auto found = table.find(key);
    const BenchRow empty_row;
    const BenchRow& row = found == table.end() ? empty_row : found->second;
    out += padded("%-40s", key);
    const auto base = row.find(baseline);
    const bool base_ok = base != row.end() && base->second.error.empty();
    for (const std::string& name : subjects) {
      const auto it = row.find(name);
      if (it == row.end() || !it->second.error.empty() || (have_baseline && !base_ok)) {
        out += padded(" %24s", "-");
        continue;
      }
      const BenchPoint& p = it->second;
      const BenchPoint none;
      const BenchPoint& b = have_baseline ? base->second : none;
      out += padded(" %24s", cell_value(p.fwd_ms, b.fwd_ms, have_baseline) + " | " + cell_value(p.bwd_ms, b.bwd_ms, have_baseline) + " | " +
                                 cell_value(p.fwd_ms + p.bwd_ms, b.fwd_ms + b.bwd_ms, have_baseline));
    }
    out += "\n";
  }
  out += have_baseline ? "(cells: speed relative to " + baseline + " in this run; records: " + records + ")\n"
                       : "(cells: median ms; " + baseline + " was not timed in this run; records: " + records + ")\n";
  return out;
}

}  // namespace fc::experiments
