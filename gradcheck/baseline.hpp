// The same-format baseline of the verdict rule (EQUATIONS.md section 6): attention as PyTorch's math
// path (scaled_dot_product_attention without a fused kernel, and its autograd) computes it in the
// subject's dtype t (the policy's format for Q), every tensor it stores rounded:
//   q_s = rnd(q sign(s) sqrt|s|), k_s = rnd(k sqrt|s|)      (the scale split over both operands)
//   S = rnd(q_s k_s^T), P = rnd(softmax(S)) (evaluated in fp32 from t values), O = rnd_o(P V)
//   dP = rnd(dO V^T), D = rowsum(P o dP) in fp32, dS = rnd(P o (dP - D)),
//   dQ = rnd_g(rnd(dS K_s) sign(s) sqrt|s|), dK = rnd_g(rnd(dS^T Q_s) sqrt|s|), dV = rnd_g(P^T dO)
// and the double backward of that graph (EQUATIONS.md section 3 in the scaled coordinates), each
// matrix product accumulated in fp32 (fp64 for fp64 policies), rnd to t, rnd_o and rnd_g to the
// policy's O and gradient formats; a GQA group's per-head gradients are summed as t tensors. L is
// m + log(sum exp(S - m)) from the rounded logits, in fp32. Its error against the oracle is the
// yardstick a subject's error is judged by.
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
