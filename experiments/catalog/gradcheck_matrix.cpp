// gradcheck-matrix: every subject x op x storage format, K generated cases each (the property run of
// `flashcheck check`, with its oracle-free properties and shrinking), one record per cell: cases,
// passed, discarded, weak, worst error ratio and ULP, and the shrunk failing case if any. The report
// draws it as a heatmap.
#include "experiments/catalog/catalog.hpp"
#include "experiments/records.hpp"
#include "gradcheck/runner.hpp"
#include "oracle/ladder.hpp"

namespace fc::experiments {

Experiment gradcheck_matrix_experiment() {
  return {"gradcheck-matrix", "every subject x op x format: K generated cases each, pass/fail and the worst error ratio",
          [](const ExperimentContext& ctx) {
            const int cases = ctx.scale == Scale::test ? 3 : ctx.scale == Scale::quick ? 25 : 300;
            std::vector<WorkItem> items;
            for (kernels::Subject* s : select_subjects(ctx, [](const kernels::SubjectInfo&) { return true; })) {
              for (kernels::Op op : s->info().ops) {
                for (Format f : s->info().formats) {
                  const PrecisionPolicy policy = PrecisionPolicy::uniform(f);
                  // the cost in error_point_cost's units: a generated case takes about 10 ms on a 2-core CPU
                  const double per_case = op == kernels::Op::fwd ? 1 : op == kernels::Op::bwd ? 2.5 : 4;
                  items.push_back({s->info().name + " " + std::string(kernels::name(op)) + " " + policy.to_string() + " x" + std::to_string(cases),
                                   per_case * cases * 5e6, [s, op, policy, cases, seed = ctx.seed] {
                                     gradcheck::RunOptions o;
                                     o.op = op, o.policy = policy, o.cases = cases, o.seed = seed;
                                     const gradcheck::RunSummary r = gradcheck::run_cases(*s, o);
                                     nlohmann::json j = record_header("experiment", device_of(s->info()));
                                     j["experiment"] = "gradcheck-matrix";
                                     j["subject"] = s->info().name;
                                     j["family"] = std::string(kernels::name(s->info().family));
                                     j["op"] = std::string(kernels::name(op));
                                     j["policy"] = policy.to_string();
                                     j["dtype"] = std::string(name(policy.format(Role::q)));
                                     j["shape"] = "generated";
                                     j["mask"] = "generated";
                                     j["seed"] = seed;
                                     j["oracle"] = std::string(oracle::name(oracle::oracle_type_for(policy)));
                                     j["rho"] = o.verdict.rho;
                                     j["floor_u"] = o.verdict.floor_u;
                                     j["metrics"] = {{"cases", r.cases},           {"passed", r.passed},
                                                     {"discarded", r.discarded},   {"weak", r.weak},
                                                     {"worst_ratio", number(r.worst_ratio)}, {"worst_ulp", number(r.worst_ulp)},
                                                     {"seconds", r.seconds}};
                                     j["verdict"] = r.failure ? "fail" : "pass";
                                     if (r.failure) j["failure"] = {{"case_index", r.failure->case_index}, {"minimal", r.failure->minimal},
                                                                    {"summary", r.failure->report.summary()}};
                                     return std::vector{j};
                                   }});
                }
              }
            }
            return items;
          }};
}

}  // namespace fc::experiments
