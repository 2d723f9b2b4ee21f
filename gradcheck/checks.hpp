// Every check of one case and one op against one subject.
//
// Against the oracle (at the precision the ladder picks for the policy), each output tensor gets the
// verdict of EQUATIONS.md section 6:  pass iff err(X) <= rho err(X_base) + floor, err = max abs error,
// X_base the same-format baseline (baseline.hpp), and
//     floor = floor_u * (u_t + u_acc * (sqrt(L) + A)) * M
// with u_t and u_acc the unit roundoffs of the policy's storage format (Q's) and accumulation format,
// L the length of the longest chain of summed terms (d + dv + Nk + (Hq/Hkv) Nq), A = 1 + the largest
// logit magnitude |s| sum_c |q k|, and M the largest magnitude of the terms X's entries are summed
// from (oracle::attention_magnitudes; for L: 1 + the largest logit magnitude + |L|, since an absolute
// error of L is a relative error of every P = exp(S - L), itself stored with error u_t). It is the rounding
// noise a correct implementation may make that a plain one need not:
//   - storing an intermediate it reuses in the storage format (O for D = rowsum(dO o O), P before
//     P V on tensor cores, dS before dS K): one rounding, u_t of that intermediate, reaching the
//     output at most at the scale of the summed terms (seen: a correct FA2-style bf16 backward at 2.9
//     times the baseline's error, both below 0.2 u_t M);
//   - summing in another order: about sqrt(L) u_acc of the terms' magnitude (probabilistic rounding
//     error analysis, Higham and Mary 2019; seen: 2.9 times the baseline at fp32);
//   - re-deriving the softmax from a rounded log-sum-exp, P = exp(S - L) as FA2's backward does: the
//     rounding of L (u |L| <= u A) becomes a relative error of P (seen: 6.6 times at fp32, logits ~50).
// Below that floor no comparison with the baseline can tell a bug from a different correct rounding
// order; above it rho x baseline judges.
// A case whose reference is outside the range of an output's format (true values beyond its largest
// finite number) has no representable answer: it is discarded, and counted.
// Also recorded: RMS, max relative error and max ULP distance (both measured against
// max(|reference|, M), the scale of the summed terms), cosine.
//
// Oracle-free properties (named in PropertyCheck):
//   determinism   two identical calls give bitwise identical outputs (subjects that claim it)
//   zero          a zero cotangent (dO, or ddQ, ddK, ddV) gives exactly zero outputs
//   homogeneity   doubling the cotangent doubles every output: scaling by 2 commutes with every
//                 rounding except of subnormals, so outputs must agree within 2 ULPs (and the error of
//                 intermediates that fell below the smallest normal, see checks.cpp)
//   additivity    g(round(a + b)) - g(a) - g(b) within 8 n A u_t of the summed terms' magnitude (the
//                 rounding of three evaluations and of the input a + b; n = d + dv + Nq + Nk + 8, A = 1 +
//                 the largest logit magnitude), plus 8 n smallest subnormals for gradual underflow
//   self-fd       fp32 and fp64 policies: the subject's backward against central differences of its
//                 own forward (its double backward against those of its own backward), step
//                 balancing truncation against the format's rounding, tolerance from both
#pragma once

#include <string>
#include <vector>

#include "gradcheck/case.hpp"
#include "kernels/attention_call.hpp"
#include "oracle/scalar.hpp"
#include "precision/metrics.hpp"

namespace fc::gradcheck {

struct VerdictOptions {
  double rho = 2.0;      // the subject may be this many times worse than the baseline
  double floor_u = 1.0;  // absolute floor, in units of (u_t + u_acc (sqrt(L) + A)) M (see above)
};

struct TensorVerdict {
  std::string tensor;  // "O", "L", "dQ", "dK", "dV", "dQ'", "dK'", "dV'", "ddO"
  Format format;       // its storage format
  ErrorMetrics subject;   // subject vs oracle
  ErrorMetrics baseline;  // baseline vs oracle
  double floor = 0;
  double ratio = 0;       // subject.max_abs / max(baseline.max_abs, floor)
  bool baseline_usable = true;  // false when the baseline itself broke down (non-finite)
  bool pass = false;
};

struct PropertyCheck {
  std::string name;
  bool pass = true;
  bool skipped = false;
  std::string detail;  // the figure, or why it failed or was skipped
};

struct CaseReport {
  Case c;
  kernels::Op op = kernels::Op::fwd;
  oracle::OracleType oracle_type = oracle::OracleType::fp64;
  VerdictOptions options;
  std::vector<TensorVerdict> tensors;
  std::vector<PropertyCheck> properties;
  std::string error;  // the subject refused or failed a case within its declared limits
  std::string discarded;  // why the case has no verdict (reference outside the format's range), or empty
  bool pass = false;
  double worst_ratio = 0;  // over tensors
  double worst_ulp = 0;    // over tensors
  double seconds = 0;
  std::string summary() const;  // one line per failing item
};

CaseReport check_case(kernels::Subject& subject, const Case& c, kernels::Op op, const VerdictOptions& options);

}  // namespace fc::gradcheck
