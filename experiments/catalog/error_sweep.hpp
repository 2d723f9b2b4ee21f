// What the error experiments (error-vs-seqlen, -flatness, -outliers, rounding's outputs) share: the
// case they sweep and the work item that checks one point of a sweep against the oracle and the
// same-format baseline (gradcheck::check_case without the oracle-free properties) and records it with
// the swept variable.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "experiments/experiment.hpp"
#include "gradcheck/case.hpp"

namespace fc::experiments {

// The storage formats the error sweeps use, among those the subject supports: bf16, fp16, fp32.
std::vector<Format> sweep_formats(const kernels::SubjectInfo& info);

// B = 1, Hq = Hkv = 2, Nq = Nk = n, d = dv = 64 (or the subject's smallest head dim), scale 1/sqrt(d),
// no mask, the given inputs and policy. The seed does not depend on the subject, so every subject of
// a sweep point sees the same inputs and the same baseline.
gradcheck::Case sweep_case(const kernels::SubjectInfo& info, int n, const PrecisionPolicy& policy, const gradcheck::InputDistribution& inputs,
                           std::uint64_t seed);

// One point: check_case(subject, c, op) judged against the oracle only, recorded as an `experiment`
// record with x = {x_name: x}.
WorkItem error_point(const std::string& experiment, kernels::Subject& subject, kernels::Op op, const gradcheck::Case& c,
                     const std::string& x_name, double x);

// Relative run time of checking op on an n x n case (the oracle and baseline dominate: O(n^2 d)).
double error_point_cost(kernels::Op op, const gradcheck::Case& c);

// The subjects an attention error sweep uses by default: every attention subject.
bool is_attention(const kernels::SubjectInfo& info);

// The sequence length and inputs of the sweep point at x.
struct SweepPoint {
  int n = 0;
  gradcheck::InputDistribution inputs;
};

// A whole sweep: for each x (outermost), attention subject, format of sweep_formats and op of the
// subject, error_point on sweep_case(point(x)).
std::vector<WorkItem> error_sweep(const ExperimentContext& ctx, const std::string& experiment, const std::string& x_name,
                                  const std::vector<double>& xs, const std::function<SweepPoint(double)>& point);

}  // namespace fc::experiments
