// Attention forward as plain loops over any scalar type with + - * /, exp, log and ordering: the
// implementation that forward-mode autodiff differentiates (Boost.Math fvar scalars), written
// independently of the Eigen one in attention_impl.hpp so that agreement means something.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "oracle/attention_problem.hpp"

namespace fc::oracle {

// Layouts as in attention_problem.hpp. Masked keys are skipped (no -inf arithmetic on derivative
// types); a fully masked row gets O = 0 and L = -inf.
template <class S>
void naive_attention_forward(const AttentionProblem& p, const S* q, const S* k, const S* v, S* o, S* lse) {
  using std::exp;
  using std::log;
  const AttentionShape& sh = p.shape;
  const int nq = sh.seq_q, nk = sh.seq_k, d = sh.head_dim, dv = sh.head_dim_v;
  std::vector<S> logits(static_cast<std::size_t>(nk));
  for (int b = 0; b < sh.batch; ++b) {
    for (int h = 0; h < sh.heads_q; ++h) {
      const int kv = b * sh.heads_kv + h / sh.group();
      const S* K = k + static_cast<std::size_t>(kv) * nk * d;
      const S* V = v + static_cast<std::size_t>(kv) * nk * dv;
      for (int i = 0; i < nq; ++i) {
        const std::size_t row = (static_cast<std::size_t>(b) * sh.heads_q + h) * nq + i;
        const S* Qi = q + row * d;
        S* Oi = o + row * dv;
        bool any = false;
        S m = S(0);
        for (int j = 0; j < nk; ++j) {
          if (!p.visible(i, j)) continue;
          S dot = S(0);
          for (int c = 0; c < d; ++c) dot += Qi[c] * K[static_cast<std::size_t>(j) * d + c];
          logits[j] = dot * p.scale;
          if (!any || logits[j] > m) m = logits[j];
          any = true;
        }
        for (int c = 0; c < dv; ++c) Oi[c] = S(0);
        if (!any) {
          lse[row] = S(-std::numeric_limits<double>::infinity());
          continue;
        }
        S denominator = S(0);
        for (int j = 0; j < nk; ++j) {
          if (!p.visible(i, j)) continue;
          const S e = exp(logits[j] - m);
          denominator += e;
          for (int c = 0; c < dv; ++c) Oi[c] += e * V[static_cast<std::size_t>(j) * dv + c];
        }
        for (int c = 0; c < dv; ++c) Oi[c] /= denominator;
        lse[row] = m + log(denominator);
      }
    }
  }
}

}  // namespace fc::oracle
