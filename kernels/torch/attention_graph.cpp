#include "kernels/torch/attention_graph.hpp"

#include <cmath>
#include <limits>

namespace fc::kernels::pt {

at::Tensor repeat_kv_heads(const at::Tensor& kv, int64_t query_heads) {
  const int64_t group = query_heads / kv.size(1);
  return group == 1 ? kv : kv.repeat_interleave(group, 1);
}

at::Tensor visibility(Mask mask, int64_t nq, int64_t nk, const at::TensorOptions& options) {
  const at::Tensor rows = at::arange(nq, options.dtype(at::kLong)).unsqueeze(1);
  const at::Tensor cols = at::arange(nk, options.dtype(at::kLong)).unsqueeze(0);
  switch (mask) {
    case Mask::none: return at::ones({nq, nk}, options.dtype(at::kBool));
    case Mask::causal_top_left: return cols <= rows;
    case Mask::causal_bottom_right: return cols <= rows + (nk - nq);
  }
  return {};
}

AttentionGraph attention_graph(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, Mask mask, double scale,
                               at::ScalarType stats) {
  const double root = std::sqrt(std::abs(scale));
  // A tensor times a scalar as PyTorch >= 2 computes it for 16-bit dtypes: in fp32 ("opmath"), rounded
  // once. libtorch 1.13's CPU kernel rounds the scalar to bf16/fp16 first, which errs by up to u |S|
  // in every logit (seen: torch.math bf16 O error 5x the baseline's on near one-hot logits); the
  // explicit fp32 product gives the same bits as PyTorch 2.x on any version.
  const auto scaled = [](const at::Tensor& x, double factor) {
    const bool half = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
    return half ? (x.to(at::kFloat) * factor).to(x.scalar_type()) : x * factor;
  };
  const at::Tensor qs = scaled(q, scale < 0 ? -root : root);
  const at::Tensor ks = scaled(repeat_kv_heads(k, q.size(1)), root);
  const at::Tensor vs = repeat_kv_heads(v, q.size(1));
  const at::Tensor logits = at::matmul(qs, ks.transpose(-2, -1));
  at::Tensor s = logits, p;
  if (mask == Mask::none) {
    p = at::softmax(s, -1);
  } else {
    const at::Tensor visible = visibility(mask, q.size(2), k.size(2), q.options());
    s = logits.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
    // A row with no visible key has P = 0, so O = 0 (EQUATIONS.md section 1), as in the "safe softmax" of
    // PyTorch >= 2.5's math path. Its logits are set to 0 before the softmax, not left at -inf: softmax of
    // an all -inf row is NaN, and its backward would carry that NaN into dQ and dK through the zeroed P.
    const at::Tensor empty_row = visible.logical_not().all(-1, /*keepdim=*/true);
    p = at::softmax(s.masked_fill(empty_row, 0), -1).masked_fill(empty_row, 0);
  }
  AttentionGraph g;
  g.o = at::matmul(p, vs);
  g.lse = at::logsumexp(s.detach().to(stats), -1, /*keepdim=*/true);
  return g;
}

}  // namespace fc::kernels::pt
