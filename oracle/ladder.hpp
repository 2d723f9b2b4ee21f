// The precision ladder: which oracle type the harness uses for a subject.
//
// Rule: the oracle's significand must be at least kLadderMarginBits wider than the widest format
// the subject computes its results in (its output, gradient and statistics storage, and its
// accumulation format; inputs are given to oracle and subject alike, exactly). The oracle's own
// error is C u_oracle with C the growth factor of oracle-check's bounds (16 n A; about 2^14 for the
// sizes the harness sweeps), and errors observed there are 1 to 10 u, so a 24-bit margin keeps the
// oracle's error below 2^-10 of the subject's unit roundoff even in the worst case: negligible in
// the verdict err(subject) <= rho err(baseline) + floor, whose terms are of order u_subject.
//   bf16 (p = 8), fp16 (11), fp32 (24)  -> fp64 (53)
//   fp64 (53)                           -> quad (113)
// mp50 (168) is for finite differences and the oracle's own checks; no subject format needs it.
#pragma once

#include "oracle/scalar.hpp"
#include "precision/policy.hpp"

namespace fc::oracle {

inline constexpr int kLadderMarginBits = 24;

// The cheapest oracle type satisfying the rule for this policy.
OracleType oracle_type_for(const PrecisionPolicy& policy);

}  // namespace fc::oracle
