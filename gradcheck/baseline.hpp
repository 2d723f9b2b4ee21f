// The same-format baseline of the verdict rule (EQUATIONS.md section 6): plain, non-flash attention as
// a user's framework computes it in the subject's dtype t (the policy's format for Q). Every matrix
// product accumulates in fp32 (fp64 when t is fp64) and is rounded to t; every elementwise result is
// rounded to t; softmax and log-sum-exp are evaluated in fp32 from t values, P is stored in t, L in
// fp32; a GQA group's gradients are summed as t tensors. Its error against the oracle is the yardstick
// a subject's error is judged by.
#pragma once

#include <vector>

#include "gradcheck/case.hpp"
#include "gradcheck/inputs.hpp"
#include "kernels/attention_call.hpp"

namespace fc::gradcheck {

// Values of the outputs of one op (contiguous [B, H, N, D] order, exactly the t-rounded values).
struct BaselineResult {
  std::vector<double> o, lse;            // fwd (always computed)
  std::vector<double> dq, dk, dv;        // bwd
  std::vector<double> dq2, dk2, dv2, ddo;  // bwdbwd
};

BaselineResult baseline(const Case& c, const CaseInputs& in, kernels::Op op);

}  // namespace fc::gradcheck
