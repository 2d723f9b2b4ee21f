// Implementation of attnres.hpp, included by one .cpp per scalar type and by attnres_magnitudes.cpp.
//
// Each token is independent; each task owns a fixed chunk of tokens (the chunking depends on the
// problem only, never on the thread count), sums its tokens' dw contributions in order, and the
// chunks' sums are added in chunk order: results are bit-identical however many threads run.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "oracle/attention_problem.hpp"  // check_array
#include "oracle/attnres.hpp"
#include "oracle/parallel.hpp"

namespace fc::oracle::detail {

constexpr std::size_t kAttnResChunks = 64;

inline std::size_t chunk_count(std::size_t tokens) { return std::min(tokens, kAttnResChunks); }
inline std::size_t chunk_begin(std::size_t chunk, std::size_t chunks, std::size_t tokens) {
  return chunk * tokens / chunks;
}

// a + b, or for magnitudes |a| + |b| given non-negative inputs: the only difference between the
// two modes in the formulas below is that subtractions become additions.
template <bool kMagnitude, class T>
T minus(const T& a, const T& b) {
  if constexpr (kMagnitude) {
    return a + b;
  } else {
    return a - b;
  }
}

// Per (layer, token): r_i, s_i, p_i of the N sources, and lse. In magnitude mode p and lse are the
// true ones (computed from the signed inputs) and s holds r |w| . |v|.
template <class T>
struct Phase1Token {
  std::vector<T> r, s, p;
  T lse = 0;
};

template <class T>
T rms_inverse(const T* x, std::size_t D, double eps) {
  using std::sqrt;
  T ss = 0;
  for (std::size_t c = 0; c < D; ++c) ss += x[c] * x[c];
  return T(1) / sqrt(ss / T(static_cast<double>(D)) + T(eps));
}

// beta = sigmoid(s_u - lse) and 1 - beta = sigmoid(lse - s_u), each computed directly: 1 - beta by
// subtraction would carry an absolute error of u, i.e. a relative error u / (1 - beta), when beta
// is near 1 (seen: 230 u in dw for a single source).
template <class T>
struct Gate {
  T beta, one_minus_beta;
};
template <class T>
Gate<T> gate(const T& s_u, const T& lse) {
  using std::exp;
  return {T(1) / (T(1) + exp(lse - s_u)), T(1) / (T(1) + exp(s_u - lse))};
}

template <class T>
T dot(const T* a, const T* b, std::size_t D) {
  T s = 0;
  for (std::size_t c = 0; c < D; ++c) s += a[c] * b[c];
  return s;
}

// Phase 1 for one (layer, token). `values` and `w` are the signed inputs.
template <class T>
void phase1_token(const AttnResShape& sh, const T* values, const T* w, std::size_t token, Phase1Token<T>& out) {
  using std::exp;
  using std::log;
  const std::size_t N = static_cast<std::size_t>(sh.sources), D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.tokens);
  out.r.resize(N), out.s.resize(N), out.p.resize(N);
  T m = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const T* v = values + (i * tokens + token) * D;
    out.r[i] = rms_inverse(v, D, sh.eps);          // r_i = (|v_i|^2 / D + eps)^(-1/2)
    out.s[i] = out.r[i] * dot(w, v, D);            // s_i = r_i (w . v_i)
    if (i == 0 || out.s[i] > m) m = out.s[i];
  }
  T sum = 0;
  for (std::size_t i = 0; i < N; ++i) sum += exp(out.s[i] - m);
  out.lse = m + log(sum);                          // lse = logsumexp_i s_i
  for (std::size_t i = 0; i < N; ++i) out.p[i] = exp(out.s[i] - out.lse);  // p_i = exp(s_i - lse)
}

template <class T>
void check_attnres(const AttnResShape& sh, std::span<const T> values, std::span<const T> queries) {
  sh.validate();
  check_array("values", values, sh.values_size());
  check_array("pseudo-queries", queries, sh.queries_size());
}

// Runs fn(token_begin, token_end, chunk) over the fixed chunks in parallel.
template <class Fn>
void for_token_chunks(const AttnResShape& sh, Fn&& fn) {
  const std::size_t tokens = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.tokens);
  const std::size_t chunks = chunk_count(tokens);
  parallel_for(chunks, [&](std::size_t c) { fn(chunk_begin(c, chunks, tokens), chunk_begin(c + 1, chunks, tokens), c); });
}

// dw summed per chunk, then over chunks in order.
template <class T>
std::vector<T> sum_chunks(const std::vector<std::vector<T>>& per_chunk, std::size_t size) {
  std::vector<T> total(size, T(0));
  for (const auto& part : per_chunk) {
    for (std::size_t i = 0; i < size; ++i) total[i] += part[i];
  }
  return total;
}

// Phase 2 backward for one (layer, token). In magnitude mode the vector inputs are absolute values
// and beta, r_u, s_u are the true ones except s_u which is replaced by its magnitude.
template <bool kMagnitude, class T>
void phase2_backward_token(std::size_t D, const T* o, const T* u, const T* w, const T* g, const Gate<T>& gate,
                           const T& r_u, const T& s_u, T* d_o, T& d_lse, T* d_u, T* dw) {
  const T& beta = gate.beta;
  T delta = 0;  // g . (o - u)
  for (std::size_t c = 0; c < D; ++c) delta += g[c] * minus<kMagnitude>(o[c], u[c]);
  const T bb = beta * gate.one_minus_beta;
  d_lse = bb * delta;                                   // dlse = beta (1 - beta) delta
  const T ds_u = kMagnitude ? T(bb * delta) : T(-bb * delta);  // ds_u = -beta (1 - beta) delta
  for (std::size_t c = 0; c < D; ++c) {
    d_o[c] = gate.one_minus_beta * g[c];                // do = (1 - beta) g
    // du = beta g + ds_u (r_u w - s_u r_u^2 u / D)
    d_u[c] = beta * g[c] + ds_u * minus<kMagnitude>(T(r_u * w[c]), T(s_u * r_u * r_u * u[c] / T(static_cast<double>(D))));
    dw[c] += ds_u * r_u * u[c];                         // dw += ds_u r_u u
  }
}

// Phase 1 backward for one (layer, token): g = do, plus dlse. Vector inputs absolute in magnitude
// mode (with |dlse| and the magnitudes of s in `t.s`).
template <bool kMagnitude, class T>
void phase1_backward_token(const AttnResShape& sh, const T* values, const T* w, std::size_t token, const Phase1Token<T>& t,
                           const T* g, const T& d_lse, T* d_values, T* dw) {
  const std::size_t N = static_cast<std::size_t>(sh.sources), D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.tokens);
  std::vector<T> a(N);
  T abar = 0;
  for (std::size_t i = 0; i < N; ++i) {
    a[i] = dot(g, values + (i * tokens + token) * D, D);  // a_i = g . v_i
    abar += t.p[i] * a[i];                                 // abar = sum_i p_i a_i
  }
  for (std::size_t i = 0; i < N; ++i) {
    const T* v = values + (i * tokens + token) * D;
    T* dv = d_values + (i * tokens + token) * D;
    const T ds = t.p[i] * (minus<kMagnitude>(a[i], abar) + d_lse);  // ds_i = p_i (a_i - abar + dlse)
    for (std::size_t c = 0; c < D; ++c) {
      // dv_i = p_i g + ds_i (r_i w - s_i r_i^2 v_i / D)
      dv[c] += t.p[i] * g[c] +
               ds * minus<kMagnitude>(T(t.r[i] * w[c]), T(t.s[i] * t.r[i] * t.r[i] * v[c] / T(static_cast<double>(D))));
      dw[c] += ds * t.r[i] * v[c];  // dw += ds_i r_i v_i
    }
  }
}

}  // namespace fc::oracle::detail

namespace fc::oracle {

template <class T>
AttnResPhase1<T> attnres_phase1_forward(const AttnResShape& sh, std::span<const T> values, std::span<const T> queries) {
  detail::check_attnres(sh, values, queries);
  const std::size_t D = static_cast<std::size_t>(sh.dim), N = static_cast<std::size_t>(sh.sources);
  const std::size_t tokens = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.tokens);
  AttnResPhase1<T> out{std::vector<T>(sh.outputs_size()), std::vector<T>(sh.lse_size())};
  detail::for_token_chunks(sh, [&](std::size_t begin, std::size_t end, std::size_t) {
    detail::Phase1Token<T> t;
    for (int layer = 0; layer < sh.layers; ++layer) {
      const T* w = queries.data() + static_cast<std::size_t>(layer) * D;
      for (std::size_t token = begin; token < end; ++token) {
        detail::phase1_token(sh, values.data(), w, token, t);
        const std::size_t row = static_cast<std::size_t>(layer) * tokens + token;
        out.lse[row] = t.lse;
        T* o = out.o.data() + row * D;
        for (std::size_t c = 0; c < D; ++c) o[c] = 0;
        for (std::size_t i = 0; i < N; ++i) {
          const T* v = values.data() + (i * tokens + token) * D;
          for (std::size_t c = 0; c < D; ++c) o[c] += t.p[i] * v[c];  // o = sum_i p_i v_i
        }
      }
    }
  });
  return out;
}

template <class T>
std::vector<T> attnres_phase2_forward(const AttnResShape& sh, std::span<const T> o, std::span<const T> lse,
                                      std::span<const T> partial, std::span<const T> queries) {
  using std::exp;
  sh.validate();
  check_array("o", o, sh.outputs_size());
  check_array("lse", lse, sh.lse_size());
  check_array("partial sums", partial, sh.outputs_size());
  check_array("pseudo-queries", queries, sh.queries_size());
  const std::size_t D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = sh.lse_size() / static_cast<std::size_t>(sh.layers);
  std::vector<T> h(sh.outputs_size());
  for (std::size_t row = 0; row < sh.lse_size(); ++row) {
    const T* w = queries.data() + (row / tokens) * D;  // row = layer * tokens + token
    const T* u = partial.data() + row * D;
    const T s_u = detail::rms_inverse(u, D, sh.eps) * detail::dot(w, u, D);  // s_u = r_u (w . u)
    const detail::Gate<T> g = detail::gate(s_u, lse[row]);                   // beta = sigmoid(s_u - lse)
    // h = o + beta (u - o), evaluated as the convex combination (1 - beta) o + beta u
    for (std::size_t c = 0; c < D; ++c) h[row * D + c] = g.one_minus_beta * o[row * D + c] + g.beta * u[c];
  }
  return h;
}

template <class T>
AttnResPhase2Grads<T> attnres_phase2_backward(const AttnResShape& sh, std::span<const T> o, std::span<const T> lse,
                                              std::span<const T> partial, std::span<const T> queries,
                                              std::span<const T> dh) {
  using std::exp;
  sh.validate();
  check_array("o", o, sh.outputs_size());
  check_array("lse", lse, sh.lse_size());
  check_array("partial sums", partial, sh.outputs_size());
  check_array("pseudo-queries", queries, sh.queries_size());
  check_array("dh", dh, sh.outputs_size());
  const std::size_t D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = sh.lse_size() / static_cast<std::size_t>(sh.layers);
  AttnResPhase2Grads<T> g{std::vector<T>(sh.outputs_size()), std::vector<T>(sh.lse_size()),
                          std::vector<T>(sh.outputs_size()), std::vector<T>(sh.queries_size(), T(0))};
  for (int layer = 0; layer < sh.layers; ++layer) {  // dw of a layer: its tokens in order
    const T* w = queries.data() + static_cast<std::size_t>(layer) * D;
    for (std::size_t token = 0; token < tokens; ++token) {
      const std::size_t row = static_cast<std::size_t>(layer) * tokens + token;
      const T* u = partial.data() + row * D;
      const T r_u = detail::rms_inverse(u, D, sh.eps);
      const T s_u = r_u * detail::dot(w, u, D);
      detail::phase2_backward_token<false>(D, o.data() + row * D, u, w, dh.data() + row * D, detail::gate(s_u, lse[row]), r_u, s_u,
                                           g.d_o.data() + row * D, g.d_lse[row], g.d_partial.data() + row * D,
                                           g.d_queries.data() + static_cast<std::size_t>(layer) * D);
    }
  }
  return g;
}

template <class T>
AttnResPhase1Grads<T> attnres_phase1_backward(const AttnResShape& sh, std::span<const T> values,
                                              std::span<const T> queries, std::span<const T> d_o,
                                              std::span<const T> d_lse) {
  detail::check_attnres(sh, values, queries);
  check_array("do", d_o, sh.outputs_size());
  check_array("dlse", d_lse, sh.lse_size());
  const std::size_t D = static_cast<std::size_t>(sh.dim);
  const std::size_t tokens = sh.lse_size() / static_cast<std::size_t>(sh.layers);
  AttnResPhase1Grads<T> g{std::vector<T>(sh.values_size(), T(0)), {}};
  std::vector<std::vector<T>> dw_chunks(detail::chunk_count(tokens), std::vector<T>(sh.queries_size(), T(0)));
  detail::for_token_chunks(sh, [&](std::size_t begin, std::size_t end, std::size_t chunk) {
    detail::Phase1Token<T> t;
    for (std::size_t token = begin; token < end; ++token) {
      for (int layer = 0; layer < sh.layers; ++layer) {  // dv of a token: its layers in order
        const T* w = queries.data() + static_cast<std::size_t>(layer) * D;
        const std::size_t row = static_cast<std::size_t>(layer) * tokens + token;
        detail::phase1_token(sh, values.data(), w, token, t);
        detail::phase1_backward_token<false>(sh, values.data(), w, token, t, d_o.data() + row * D, d_lse[row],
                                             g.d_values.data(), dw_chunks[chunk].data() + static_cast<std::size_t>(layer) * D);
      }
    }
  });
  g.d_queries = detail::sum_chunks(dw_chunks, sh.queries_size());
  return g;
}

template <class T>
std::vector<T> attnres_forward(const AttnResShape& sh, std::span<const T> values, std::span<const T> partial,
                               std::span<const T> queries) {
  const AttnResPhase1<T> p1 = attnres_phase1_forward(sh, values, queries);
  return attnres_phase2_forward<T>(sh, p1.o, p1.lse, partial, queries);
}

template <class T>
AttnResGrads<T> attnres_backward(const AttnResShape& sh, std::span<const T> values, std::span<const T> partial,
                                 std::span<const T> queries, std::span<const T> dh) {
  const AttnResPhase1<T> p1 = attnres_phase1_forward(sh, values, queries);
  AttnResPhase2Grads<T> g2 = attnres_phase2_backward<T>(sh, p1.o, p1.lse, partial, queries, dh);
  AttnResPhase1Grads<T> g1 = attnres_phase1_backward<T>(sh, values, queries, g2.d_o, g2.d_lse);
  for (std::size_t i = 0; i < g1.d_queries.size(); ++i) g1.d_queries[i] += g2.d_queries[i];
  return {std::move(g1.d_values), std::move(g2.d_partial), std::move(g1.d_queries)};
}

}  // namespace fc::oracle
