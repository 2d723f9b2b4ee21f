// The same-format baseline of an AttnRes case: the two-phase AttnRes as an eager PyTorch program
// computes it in the policy's formats, every tensor it stores rounded (the counterpart of
// baseline.hpp for attention). The working format t is the values' (role v):
//   k_i = rnd(r_i v_i) (RMS norm computed wide, output rounded), logits rnd(w . k_i),
//   p = rnd(softmax(logits)), lse = logsumexp in the statistics format, o = Sigma p_i v_i stored as
//   the policy stores o (fp16: with a per-row scale); phase 2: k_u, s_u as above, beta =
//   rnd(sigmoid(s_u - lse)), diff = rnd(u - o), h = o + rnd(beta diff) stored like o.
//   Backward: autograd through those operations, every gradient tensor rounded to t and summed as t
//   tensors (dv over the S layers); dw summed over tokens wide, rounded once; outputs in the gradient
//   format. Products are exact and sums wide (fp32, or fp64 under an fp64 policy), as PyTorch's
//   reductions accumulate.
#pragma once

#include <vector>

#include "gradcheck/attnres_case.hpp"
#include "gradcheck/inputs.hpp"

namespace fc::gradcheck {

struct AttnResBaselineResult {
  std::vector<double> o, lse, h;                     // fwd
  std::vector<double> d_values, d_partial, d_queries;  // bwd
};

AttnResBaselineResult attnres_baseline(const AttnResCase& c, const AttnResInputs& in, kernels::Op op);

}  // namespace fc::gradcheck
