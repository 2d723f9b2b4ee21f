// Every registered subject, every format and op it declares: generated cases raise no false alarm.
// A new kernel is one registration in kernels/builtin_subjects.cpp; this suite then covers it.
#include <gtest/gtest.h>

#include "gradcheck/registry.hpp"
#include "gradcheck/runner.hpp"

namespace fc::gradcheck {
namespace {

// One test looping over the registry (a parameterised suite would build the registry during static
// initialisation, before the thread pool's statics exist).
TEST(EveryBuiltinSubject, PassesGeneratedCasesInEveryFormatAndOp) {
  const Registry registry = Registry::with_builtins();
  int runs = 0;
  for (kernels::Subject* s : registry.subjects()) {
    if (s->info().family != kernels::Family::attention) continue;  // the attention harness only
    for (Format f : s->info().formats) {
      for (kernels::Op op : s->info().ops) {
        RunOptions o;
        o.op = op, o.policy = PrecisionPolicy::uniform(f), o.cases = 30, o.seed = 77, o.limits.max_seq = 80;
        const RunSummary r = run_cases(*s, o);
        const std::string what = s->info().name + " " + std::string(name(f)) + " " + std::string(kernels::name(op));
        EXPECT_EQ(r.passed + r.discarded, r.cases)
            << what << "\n" << (r.failure ? r.failure->minimal.to_string() + "\n" + r.failure->report.summary() : "");
        EXPECT_LT(r.discarded, r.cases / 3) << what << ": most cases must get a verdict";
        ++runs;
      }
    }
  }
  EXPECT_GE(runs, 40) << "the registry lost subjects";
}

}  // namespace
}  // namespace fc::gradcheck
