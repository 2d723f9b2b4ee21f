#include "gradcheck/runner.hpp"

#include <chrono>

namespace fc::gradcheck {

RunSummary run_cases(kernels::Subject& subject, const RunOptions& o, const std::function<void(const CaseReport&)>& on_case) {
  const auto start = std::chrono::steady_clock::now();
  const rc::Gen<Case> gen = case_generator(subject.info(), o.policy, o.limits);
  rc::Random random(o.seed);
  RunSummary summary;
  for (int i = 0; i < o.cases; ++i) {
    const rc::Shrinkable<Case> drawn = gen(random.split(), case_size(i, o.cases));
    CaseReport report = check_case(subject, drawn.value(), o.op, o.verdict);
    ++summary.cases;
    if (on_case) on_case(report);
    if (!report.discarded.empty()) {
      ++summary.discarded;
      continue;
    }
    summary.worst_ratio = std::max(summary.worst_ratio, report.worst_ratio);
    summary.weak += report.weak_tensors > 0 ? 1 : 0;
    summary.worst_ulp = std::max(summary.worst_ulp, report.worst_ulp);
    if (report.pass) {
      ++summary.passed;
      continue;
    }
    if (summary.failure) continue;  // keep the first failure only
    Failure f;
    f.case_index = i;
    f.original = drawn.value();
    rc::Shrinkable<Case> current = drawn;
    f.report = report;
    bool improved = true;
    while (improved && f.shrink_steps < o.max_shrink_steps) {
      improved = false;
      rc::Seq<rc::Shrinkable<Case>> shrinks = current.shrinks();
      while (auto candidate = shrinks.next()) {
        if (++f.shrink_steps > o.max_shrink_steps) break;
        CaseReport r = check_case(subject, candidate->value(), o.op, o.verdict);
        if (!r.pass && r.discarded.empty()) {
          current = *candidate;
          f.report = std::move(r);
          improved = true;
          break;
        }
      }
    }
    f.minimal = current.value();
    summary.failure = std::move(f);
    if (o.stop_at_first_failure) break;
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace fc::gradcheck
