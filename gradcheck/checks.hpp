// Every check of one case and one op against one subject.
//
// Against the oracle (at the precision the ladder picks for the policy), each output tensor gets the
// verdict of EQUATIONS.md section 6:  pass iff err(X) <= rho err(X_base) + floor, err = max abs error,
// X_base the same-format baseline (baseline.hpp: PyTorch's math attention, every tensor it stores
// rounded), and
//     floor = floor_u * ((u_t + u_acc * (sqrt(L) + A)) * M + storage_underflow)
// with u_t and u_acc the unit roundoffs of the policy's storage format (Q's) and accumulation format,
// L the length of the longest chain of summed terms (d + dv + Nk + (Hq/Hkv) Nq), A = 2 (1 + the
// largest logit magnitude |s| sum_c |q k|) + ln Nk, and M the largest magnitude of the terms X's
// entries are summed from (oracle::attention_magnitudes; for L: 1 + the largest logit magnitude + |L|,
// since an absolute error of L is a relative error of every P = exp(S - L)). The baseline already makes
// the roundings a framework makes; the floor is what a correct implementation may add by rounding at
// other points, where the baseline's own error happened to be small (one realisation of random
// roundings, often a lucky one on small cases):
//   - an intermediate stored in the storage format at another point (FA2's D = rowsum(dO o O) from
//     the stored O, P rounded after a different scaling): u_t at the summed terms' scale (seen: a
//     correct FA2-style bf16 backward at 5.4 times the baseline's error, both below 0.05 u_t M);
//   - summing in another order: about sqrt(L) u_acc of the terms' magnitude (probabilistic rounding
//     error analysis, Higham and Mary 2019; seen: 3.2 times the baseline at fp32);
//   - logits rounded at another point, or P = exp(S - L) re-derived from a rounded L as FA2's backward
//     does: S and L each carry a relative rounding, a relative error of P of u_acc (|S| + |L|) <= u_acc A
//     (seen: 3.6 times the baseline at fp32 with logits ~50, and 1.06 times the floor with A = 1 + max|S|);
//   - storage_underflow (verdict.hpp): outputs in the format's subnormal range, whose spacing is absolute
//     (the smallest subnormal s_t): s_t under round-to-nearest, 2 s_t under stochastic rounding (seen:
//     fp16 SR d_queries ~1e-7, 0.85 s_t off against a baseline 0.19 s_t off, on the CPU and GPU alike).
// Below that floor no comparison with the baseline can tell a bug from a different correct rounding
// order; above it rho x baseline judges. Where the floor reaches a quarter of the largest exact value
// (heavy cancellation: exact values far below the terms they are summed from, or exactly zero) the
// tensor's verdict is flagged not discriminating ("weak") and counted: it would accept a wrong answer.
// A case whose reference is outside the range of an output's format (true values beyond its largest
// finite number) has no representable answer, and one on which the same-format baseline itself
// overflows is beyond the format's working range (seen: fp16 with inputs of size 100, where the
// double backward's dS' reaches 2e5): either is discarded, and counted. A subject that overflows where
// the baseline does not is failed. Outputs are filled with NaN before every call, so an entry a subject
// never writes fails.
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
//                 the largest logit magnitude), plus 8 n smallest subnormals for gradual underflow, plus
//                 the final rounding of the three outputs, u_t (2 u_t under SR) times their own size;
//                 the term in the exact magnitudes times e^(2 u_t A), how far logits rounded to t can move
//                 a softmax weight (checks.cpp; verdict.cpp: the case where computed terms are far from
//                 the exact ones)
//   self-fd       fp32 and fp64 policies: the subject's backward against central differences of its
//                 own forward (its double backward against those of its own backward), step
//                 balancing truncation against the format's rounding, tolerance from both
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gradcheck/attnres_case.hpp"
#include "gradcheck/case.hpp"
#include "gradcheck/verdict.hpp"
#include "kernels/attention_call.hpp"
#include "oracle/attention_problem.hpp"
#include "oracle/scalar.hpp"
#include "precision/metrics.hpp"

namespace fc::gradcheck {

// e^(2 u A), capped: the factor by which rounding logits of size up to A to unit roundoff u can move a
// softmax weight (additivity's bound carries it).
double weight_perturbation(double u, double amp);
// The additivity property, skipped with its reason, when 2 u A > 10 (the weights move by more than e^10);
// empty where the property applies. Both families' checks use it.
std::optional<PropertyCheck> additivity_undetermined(double u, double amp, const std::string& format);

// The oracle's description of a case's problem (shape, mask, scale).
oracle::AttentionProblem to_problem(const Case& c);


struct CaseReport {
  kernels::Family family = kernels::Family::attention;
  Case c;               // the case, for an attention subject
  AttnResCase attnres;  // the case, for an AttnRes subject (attnres_checks.hpp)
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
  int weak_tensors = 0;    // tensors whose verdict is not discriminating
  double seconds = 0;
  std::string summary() const;  // one line per failing item
  std::string case_text() const;  // the case's text form, whichever family
  // pass, worst_ratio, worst_ulp and weak_tensors from the tensors, properties and error (a judged case)
  void conclude();
  const PrecisionPolicy& policy() const { return family == kernels::Family::attention ? c.policy : attnres.policy; }
};

CaseReport check_case(kernels::Subject& subject, const Case& c, kernels::Op op, const VerdictOptions& options);

// The oracle step of either family: each output of `out` against its reference and the baseline's
// values, with floor = floor_u (noise_units[i] magnitudes[i] + storage_underflow of the output's range
// format under the case's rounding) (r.options). Or no verdict: the case is
// discarded when an exact value lies outside an output's range or the baseline itself overflowed
// (r.discarded says why, r.pass is set true: runs count it as discarded). Returns whether it was judged.
template <class T>
bool judge_outputs(CaseReport& r, const Outputs& out, const std::vector<std::vector<T>>& reference,
                   const std::vector<std::vector<double>>& baseline, const std::vector<double>& magnitudes,
                   const std::vector<double>& noise_units);

// A case given as text (a reproduce command, a corpus line), parsed as the subject's family's case
// (Case or AttnResCase) and checked. Throws std::invalid_argument for a malformed text.
CaseReport check_case_text(kernels::Subject& subject, const std::string& text, kernels::Op op, const VerdictOptions& options);

}  // namespace fc::gradcheck
