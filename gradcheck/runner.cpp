#include "gradcheck/runner.hpp"

#include <chrono>

#include "gradcheck/attnres_checks.hpp"

namespace fc::gradcheck {

namespace {

template <class C, class Check>
RunSummary run_generated(const rc::Gen<C>& gen, const Check& check, const RunOptions& o,
                         const std::function<void(const CaseReport&)>& on_case) {
  const auto start = std::chrono::steady_clock::now();
  rc::Random random(o.seed);
  RunSummary summary;
  for (int i = 0; i < o.cases; ++i) {
    // every case's generator state is split off in the same order, so a shard's cases are the
    // unsharded run's cases i with shard.owns(i)
    rc::Random own = random.split();
    if (!o.shard.owns(static_cast<std::size_t>(i))) continue;
    const rc::Shrinkable<C> drawn = gen(own, case_size(i, o.cases));
    CaseReport report = check(drawn.value());
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
    f.original = drawn.value().to_string();
    rc::Shrinkable<C> current = drawn;
    f.report = report;
    bool improved = true;
    while (improved && f.shrink_steps < o.max_shrink_steps) {
      improved = false;
      rc::Seq<rc::Shrinkable<C>> shrinks = current.shrinks();
      while (auto candidate = shrinks.next()) {
        if (++f.shrink_steps > o.max_shrink_steps) break;
        CaseReport r = check(candidate->value());
        if (!r.pass && r.discarded.empty()) {
          current = *candidate;
          f.report = std::move(r);
          improved = true;
          break;
        }
      }
    }
    f.minimal = current.value().to_string();
    summary.failure = std::move(f);
    if (o.stop_at_first_failure) break;
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace

RunSummary run_cases(kernels::Subject& subject, const RunOptions& o, const std::function<void(const CaseReport&)>& on_case) {
  if (subject.info().family == kernels::Family::attnres) {
    return run_generated(attnres_case_generator(subject.info(), o.policy, o.limits),
                         [&](const AttnResCase& c) { return check_attnres_case(subject, c, o.op, o.verdict); }, o, on_case);
  }
  return run_generated(case_generator(subject.info(), o.policy, o.limits),
                       [&](const Case& c) { return check_case(subject, c, o.op, o.verdict); }, o, on_case);
}

}  // namespace fc::gradcheck
