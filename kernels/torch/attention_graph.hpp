// Plain attention as a graph of eager PyTorch ops (EQUATIONS.md section 1), differentiable by
// autograd to any order: torch.math's forward, and the reference the SDPA subjects' callers expand
// GQA with. Rounding follows the dtype of the inputs, as PyTorch's math path does: the scale is split
// over both operands (q sign(s) sqrt|s|, k sqrt|s|), S = q_s k_s^T, P = softmax(S) and O = P V are each
// stored in that dtype (matrix products and softmax accumulate in fp32 inside ATen, fp64 for fp64).
#pragma once

#include <ATen/ATen.h>

#include "kernels/attention_call.hpp"

namespace fc::kernels::pt {

struct AttentionGraph {
  at::Tensor o;    // [B, Hq, Nq, Dv], the inputs' dtype
  at::Tensor lse;  // [B, Hq, Nq, 1], log-sum-exp of the stored logits in `stats` dtype (-inf for a row with no visible key)
};

// Key and value heads repeated to the query heads' count (GQA: query head h reads kv head h / group).
at::Tensor repeat_kv_heads(const at::Tensor& kv, int64_t query_heads);

// [Nq, Nk] booleans, true where (i, j) is visible under the mask.
at::Tensor visibility(Mask mask, int64_t nq, int64_t nk, const at::TensorOptions& options);

AttentionGraph attention_graph(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Mask mask, double scale,
                               at::ScalarType stats);

}  // namespace fc::kernels::pt
