// Every check of one AttnRes case and one op against an attnres subject (the counterpart of
// checks.hpp for attention; the verdict and the properties are verdict.hpp's).
//
// Outputs judged against the oracle (oracle/attnres.hpp, at the precision the ladder picks):
//   fwd: o and lse (phase 1), h (phase 2, from the subject's own stored o and lse)
//   bwd: d_values, d_partial, d_queries (the gradients of <dh, h>, from the subject's own fwd)
// Each passes iff err <= rho err(baseline) + floor, the baseline attnres_baseline.hpp's, and
//     floor = floor_u ((u_t + u_acc (sqrt(L) + A)) M + storage_underflow)
// as for attention: u_t the largest unit roundoff among the stored roles (values, o, gradients: one
// rounding of a stored intermediate, such as o before phase 2 or do between the backward kernels),
// u_acc the accumulation format's; L the longest chain of summed terms (2 D + N + S, plus B T for
// d_queries, which sums over every token); A = 2 (1 + the largest logit magnitude) + ln(N + 1) (a
// logit or lse rounded at another point is a relative error of every p); M the largest magnitude of
// the terms an output is summed from (o: the largest |v|; lse: 1 + the largest logit + |lse|; h and
// the gradients: oracle::attnres_magnitudes). fp16 outputs carried with per-row scales are judged
// on their true values; their range is fp32's.
// Oracle-free: determinism (fwd and bwd); for bwd, zero (dh = 0 gives exactly 0), homogeneity
// (2 dh doubles every output, within 2 ULPs plus gradual underflow) and additivity in dh.
// Not here yet: finite differences of the subject's own forward (attention has them).
#pragma once

#include "gradcheck/attnres_case.hpp"
#include "gradcheck/checks.hpp"

namespace fc::gradcheck {

CaseReport check_attnres_case(kernels::Subject& subject, const AttnResCase& c, kernels::Op op, const VerdictOptions& options);

}  // namespace fc::gradcheck
