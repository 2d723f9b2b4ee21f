// attnres_one_softmax_forward (declared in attnres.hpp): a template over any scalar type, including
// Boost.Math's autodiff fvar, so it lives in a header.
#pragma once

#include <cmath>
#include <vector>

namespace fc::oracle {

template <class S>
void attnres_one_softmax_forward(const AttnResShape& sh, const S* values, const S* partial, const S* queries, S* h) {
  using std::exp;
  using std::sqrt;
  const std::size_t N = static_cast<std::size_t>(sh.sources), D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.tokens);
  std::vector<S> logits(N + 1);
  // Logit of one source x: (x . w) / sqrt(|x|^2 / D + eps), keys RMS-normalised, values raw.
  const auto logit = [&](const S* x, const S* w) {
    S ss = S(0), dot = S(0);
    for (std::size_t c = 0; c < D; ++c) ss += x[c] * x[c], dot += w[c] * x[c];
    return dot / sqrt(ss / static_cast<double>(D) + sh.eps);
  };
  for (int layer = 0; layer < sh.layers; ++layer) {
    const S* w = queries + static_cast<std::size_t>(layer) * D;
    for (std::size_t token = 0; token < tokens; ++token) {
      const std::size_t out = static_cast<std::size_t>(layer) * tokens + token;
      const S* u = partial + out * D;
      for (std::size_t i = 0; i < N; ++i) logits[i] = logit(values + (i * tokens + token) * D, w);
      logits[N] = logit(u, w);
      S m = logits[0];
      for (std::size_t i = 1; i <= N; ++i) {
        if (logits[i] > m) m = logits[i];
      }
      S denominator = S(0);
      S* hi = h + out * D;
      for (std::size_t c = 0; c < D; ++c) hi[c] = S(0);
      for (std::size_t i = 0; i <= N; ++i) {
        const S e = exp(logits[i] - m);
        denominator += e;
        const S* x = i < N ? values + (i * tokens + token) * D : u;
        for (std::size_t c = 0; c < D; ++c) hi[c] += e * x[c];
      }
      for (std::size_t c = 0; c < D; ++c) hi[c] /= denominator;
    }
  }
}

}  // namespace fc::oracle
