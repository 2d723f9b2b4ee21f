// Self-verification of the oracle: independent computations of the same quantity must agree within
// a bound stated in unit roundoffs of the arithmetic used. `flashcheck oracle-check` and the ctest
// label `oracle` run these on random small cases.
//
// Every figure is value = |difference| / (u_T * magnitude), where magnitude bounds the size of the
// terms the compared quantities are summed from (attention_magnitudes), so a rounding error of
// C u_T relative to those terms is value C, whatever cancellation the exact result has.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oracle/attention_problem.hpp"
#include "oracle/attnres.hpp"
#include "oracle/scalar.hpp"

namespace fc::oracle {

struct Agreement {
  std::string check;  // what is compared, e.g. "backward: analytic vs autodiff"
  OracleType type;    // the arithmetic of the compared values
  double value;       // |difference| / (u_type * magnitude)
  double bound;       // the largest value rounding can explain (see bound_reason)
  bool pass() const { return value <= bound; }  // NaN never passes
};

// Why each check's bound is what it is (one line per check name).
std::string_view bound_reason(std::string_view check);

// A reproducible attention check case: the problem and the seed its inputs are drawn from.
struct AttentionCase {
  AttentionProblem problem;
  std::uint64_t seed = 0;
  std::string to_string() const;  // problem.to_string() + " seed=N"
  // Parses to_string's form; throws std::invalid_argument naming what is wrong.
  static AttentionCase parse(std::string_view text);
};

// A random small case (B <= 2, Hkv <= 2, Hq/Hkv <= 3, Nq, Nk <= 9, d, dv <= 8, any mask, scale
// 1/sqrt(d) times a factor in [0.25, 2] and sometimes negative), drawn from `seed`.
AttentionCase random_attention_case(std::uint64_t seed);

// All attention agreements for one case: first order (analytic vs autodiff in double and quad,
// vs finite differences in mp50), second order (the same for the double backward), and the
// precision ladder (forward, backward, double backward in double and quad vs mp50).
std::vector<Agreement> check_attention(const AttentionCase& c);

// A reproducible Attention Residuals check case.
struct AttnResCase {
  AttnResShape shape;
  std::uint64_t seed = 0;
  std::string to_string() const;  // shape.to_string() + " seed=N"
  static AttnResCase parse(std::string_view text);
};

// N <= 5 sources, B <= 2, T <= 3, D <= 12, S <= 3 layers, eps in {1e-6, 1e-3, 0.5}; each source
// vector scaled by e^z, z ~ N(0, 1), so RMS norms vary and eps matters for some.
AttnResCase random_attnres_case(std::uint64_t seed);

// AttnRes agreements for one case: two-phase vs one-softmax form (double, quad, mp50), analytic
// backward vs autodiff (double, quad) and vs finite differences (mp50), and double and quad vs mp50.
std::vector<Agreement> check_attnres(const AttnResCase& c);

}  // namespace fc::oracle
