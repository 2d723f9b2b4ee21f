// What every family's checks share: one output tensor's verdict against the oracle and the
// same-format baseline (EQUATIONS.md section 6; checks.hpp explains the floor), the outputs of one
// call, and the oracle-free properties (determinism, zero, homogeneity, additivity).
#pragma once

#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradcheck/tensor.hpp"
#include "precision/metrics.hpp"

namespace fc::gradcheck {

struct VerdictOptions {
  double rho = 2.0;      // the subject may be this many times worse than the baseline
  double floor_u = 1.0;  // absolute floor, in units of the family's noise unit times M (checks.hpp)
  // Judge against the oracle and the baseline only, without the oracle-free properties (each re-runs
  // the subject): the experiments measure errors at sizes where those re-runs would dominate the time.
  bool oracle_only = false;
};

struct TensorVerdict {
  std::string tensor;  // "O", "L", "dQ", ..., or AttnRes's "o", "lse", "h", "d_values", ...
  Format format;       // its storage format
  ErrorMetrics subject;   // subject vs oracle
  ErrorMetrics baseline;  // baseline vs oracle
  double floor = 0;
  double ratio = 0;       // subject.max_abs / max(baseline.max_abs, floor)
  bool baseline_usable = true;  // false when the baseline itself overflowed (the case is then discarded)
  // false when the floor is at least a quarter of the largest exact value: the rule would then accept
  // answers that are plainly wrong (even all zeros), so the tensor's pass says little (heavy
  // cancellation: the exact values far below the terms they are summed from). Counted, not hidden.
  bool discriminating = true;
  bool pass = false;
};

struct PropertyCheck {
  std::string name;
  bool pass = true;
  bool skipped = false;
  std::string detail;  // the figure, or why it failed or was skipped
};

// One output of a call: its tensor and, for rows stored with per-row scales (AttnRes's fp16), the
// scales. values() are the true values (stored x scale).
struct Output {
  std::string name;
  Tensor tensor;
  Tensor scale;  // empty view unless scaled
  std::vector<double> values() const;
  bool bitwise_equal(const Output& other) const;
  bool has_nonfinite() const;
  Format format() const { return tensor.view().format; }
  // The format whose range bounds the true values: fp32 (the scale's) for scaled rows.
  Format range_format() const { return scale.view().data ? Format::fp32 : format(); }
};

// The outputs of one op, by name, in the order reports list them.
struct Outputs {
  std::vector<Output> tensors;
  const Output& at(const std::string& name) const;
  void add(std::string name, Tensor t, Tensor scale = {});
  void poison();  // every entry NaN (and every scale): an entry a subject never writes fails
};

std::string shortest(double x);  // 4 significant digits

// err(X) <= rho err(X_base) + floor, floor = floor_u (noise_unit magnitude + underflow).
template <class T>
TensorVerdict verdict(const std::string& name, Format format, const std::vector<double>& subject, const std::vector<double>& base,
                      const std::vector<T>& reference, double magnitude, double noise_unit, const VerdictOptions& o, double underflow = 0);

// Non-empty (the reason) when some finite exact value lies beyond `range`'s largest finite number:
// such a case has no representable answer and gets no verdict.
template <class T>
std::string outside_range(const std::string& name, Format range, const std::vector<T>& reference);

PropertyCheck determinism(const Outputs& a, const Outputs& b);
PropertyCheck zero(const Outputs& out);
// g(2a) = 2 g(a) within 2 ULPs of each output's format plus `underflow` (checks.hpp).
PropertyCheck homogeneity(const Outputs& once, const Outputs& twice, double underflow);
// |g(c) - g(a) - g(b)| <= bound (m_a + m_b + m_c) + underflow + output_rounding (|g(a)| + |g(b)| +
// |g(c)|), elementwise (magnitudes m per output; output_rounding: the largest relative error of one
// rounding of an output, u of its format under RN, 2u under SR).
PropertyCheck additivity(const Outputs& ga, const Outputs& gb, const Outputs& gc, const std::vector<std::vector<double>>& ma,
                         const std::vector<std::vector<double>>& mb, const std::vector<std::vector<double>>& mc, double bound,
                         double underflow, double output_rounding);

// The floor's storage term, in units of M: u_t (one rounding of a stored intermediate at another point
// than the baseline's) under round-to-nearest. Under stochastic rounding 4 u_t: an SR rounding errs by
// up to a whole ulp (2 u_t), not half of one, and the RN baseline reproduces neither that of the stored
// intermediate nor that of the output itself (seen: cpu.attnres h at 2.05 times a lucky RN baseline,
// 2.15 u_t M, with o and h both rounded stochastically).
inline double storage_noise(Rounding rounding, double u_t) { return rounding == Rounding::stochastic ? 4 * u_t : u_t; }
// The floor's absolute term: below an output format's smallest normal its spacing is absolute (the
// smallest subnormal s_t), so a rounding there errs by up to s_t / 2 (RN) or s_t (SR) however small M
// is, and u_t M no longer bounds it. One rounding of the output and one of a stored intermediate: s_t
// under RN, 2 s_t under SR (seen: cpu.attnres and cuda.attnres alike, fp16 SR, d_queries ~1e-7 from
// one-hot inputs, 0.85 s_t off against a baseline 0.19 s_t off: 4.5 times rho's allowance).
inline double storage_underflow(Rounding rounding, double s_t) { return rounding == Rounding::stochastic ? 2 * s_t : s_t; }

double largest_finite(const std::vector<double>& x);  // max |x| over finite entries (0 if none)

}  // namespace fc::gradcheck
