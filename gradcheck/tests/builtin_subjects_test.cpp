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
    std::vector<PrecisionPolicy> policies;
    for (Format f : s->info().formats) policies.push_back(PrecisionPolicy::uniform(f));
    if (s->info().family == kernels::Family::attnres) {  // the mixed bf16 + fp16 policies, and SR
      policies.push_back(PrecisionPolicy::parse("bf16,o=fp16"));
      policies.push_back(PrecisionPolicy::parse("bf16,o=fp16,round=sr,seed=3"));
    }
    for (const PrecisionPolicy& policy : policies) {
      for (kernels::Op op : s->info().ops) {
        RunOptions o;
        o.op = op, o.policy = policy, o.cases = 30, o.seed = 77, o.limits.max_seq = 80;
        const RunSummary r = run_cases(*s, o);
        const std::string what = s->info().name + " " + policy.to_string() + " " + std::string(kernels::name(op));
        EXPECT_EQ(r.passed + r.discarded, r.cases)
            << what << "\n" << (r.failure ? r.failure->minimal + "\n" + r.failure->report.summary() : "");
        EXPECT_LT(r.discarded, r.cases / 3) << what << ": most cases must get a verdict";
        ++runs;
      }
    }
  }
  EXPECT_GE(runs, 52) << "the registry lost subjects";
}

}  // namespace
}  // namespace fc::gradcheck
