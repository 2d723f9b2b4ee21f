#include "kernels/cpu/attnres_phases.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"

namespace fc::kernels::cpu::attnres {
namespace {

constexpr int kTokensPerTask = 64;  // tokens per task, and per d_queries partial sum

// Indexing and task split shared by the four kernels.
struct Layout {
  int N, BT, D, S;
  explicit Layout(const Dims& d) : N(d.sources), BT(d.tokens), D(d.dim), S(d.layers) {}
  std::size_t row(int outer, int token) const { return (static_cast<std::size_t>(outer) * BT + token) * D; }
  std::size_t stat(int s, int token) const { return static_cast<std::size_t>(s) * BT + token; }
  std::size_t tasks() const { return static_cast<std::size_t>((BT + kTokensPerTask - 1) / kTokensPerTask); }
  int token_begin(std::size_t task) const { return static_cast<int>(task) * kTokensPerTask; }
  int token_end(std::size_t task) const { return std::min(BT, token_begin(task) + kTokensPerTask); }
};

template <class A>
A dot(const A* a, const A* b, int n) {
  A s = 0;
  for (int c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

template <class A>
A rms_inverse(const A* x, int D, A eps) {
  return A(1) / std::sqrt(dot(x, x, D) / static_cast<A>(D) + eps);
}

template <class A>
A sigmoid_of_difference(A s, A lse) {  // sigmoid(s - lse) = 1 / (1 + exp(lse - s)): 0 or 1 at the extremes, never NaN
  return A(1) / (A(1) + std::exp(lse - s));
}

// d_queries from per-task partials [task, S, D], added in task order: deterministic.
template <class A>
void sum_partials(const Layout& L, const std::vector<A>& partials, A* out) {
  const std::size_t n = static_cast<std::size_t>(L.S) * L.D;
  std::fill_n(out, n, A(0));
  for (std::size_t task = 0; task < L.tasks(); ++task) {
    for (std::size_t j = 0; j < n; ++j) out[j] += partials[task * n + j];
  }
}

}  // namespace

template <class A>
void phase1_forward(const Dims& dims, const A* v, const A* w, A* o, A* lse) {
  const Layout L(dims);
  const A eps = static_cast<A>(dims.eps);
  parallel_for(L.tasks(), [&](std::size_t task) {
    std::vector<A> r(L.N), logit(L.N);
    for (int t = L.token_begin(task); t < L.token_end(task); ++t) {
      for (int i = 0; i < L.N; ++i) r[i] = rms_inverse(&v[L.row(i, t)], L.D, eps);
      for (int s = 0; s < L.S; ++s) {
        const A* ws = &w[static_cast<std::size_t>(s) * L.D];
        A m = -std::numeric_limits<A>::infinity();
        for (int i = 0; i < L.N; ++i) logit[i] = r[i] * dot(ws, &v[L.row(i, t)], L.D), m = std::max(m, logit[i]);
        A* out = &o[L.row(s, t)];
        std::fill_n(out, L.D, A(0));
        A l = 0;
        for (int i = 0; i < L.N; ++i) {  // sources in order
          const A pi = std::exp(logit[i] - m);
          l += pi;
          const A* vi = &v[L.row(i, t)];
          for (int c = 0; c < L.D; ++c) out[c] += pi * vi[c];
        }
        for (int c = 0; c < L.D; ++c) out[c] /= l;
        lse[L.stat(s, t)] = m + std::log(l);
      }
    }
  });
}

template <class A>
void phase2_forward(const Dims& dims, const A* o, const A* lse, const A* u, const A* w, A* h) {
  const Layout L(dims);
  const A eps = static_cast<A>(dims.eps);
  parallel_for(L.tasks(), [&](std::size_t task) {
    for (int s = 0; s < L.S; ++s) {
      const A* ws = &w[static_cast<std::size_t>(s) * L.D];
      for (int t = L.token_begin(task); t < L.token_end(task); ++t) {
        const A* ut = &u[L.row(s, t)];
        const A beta = sigmoid_of_difference(rms_inverse(ut, L.D, eps) * dot(ws, ut, L.D), lse[L.stat(s, t)]);
        const A* ot = &o[L.row(s, t)];
        A* ht = &h[L.row(s, t)];
        for (int c = 0; c < L.D; ++c) ht[c] = ot[c] + beta * (ut[c] - ot[c]);
      }
    }
  });
}

template <class A>
void phase2_backward(const Dims& dims, const A* o, const A* lse, const A* u, const A* w, const A* dh, A* d_o, A* d_lse,
                     A* du, A* d_queries) {
  const Layout L(dims);
  const A eps = static_cast<A>(dims.eps);
  std::vector<A> dw_partial(L.tasks() * L.S * L.D, A(0));  // [task, S, D]
  parallel_for(L.tasks(), [&](std::size_t task) {
    for (int s = 0; s < L.S; ++s) {  // per layer: s outer, as the per-layer kernel runs
      const A* ws = &w[static_cast<std::size_t>(s) * L.D];
      A* dw = &dw_partial[(task * L.S + s) * L.D];
      for (int t = L.token_begin(task); t < L.token_end(task); ++t) {
        const std::size_t r = L.stat(s, t);
        const A* ut = &u[L.row(s, t)];
        const A* ot = &o[L.row(s, t)];
        const A* g = &dh[L.row(s, t)];
        const A ru = rms_inverse(ut, L.D, eps), su = ru * dot(ws, ut, L.D);
        // 1 - beta as a sigmoid of its own, not by subtraction: when beta rounds to 1 (s_u >> lse), 1 - beta
        // would lose every digit (seen: d_values of a one-source case wrong by 100% of its value in fp32)
        const A beta = sigmoid_of_difference(su, lse[r]), one_minus_beta = sigmoid_of_difference(lse[r], su);
        A delta = 0;
        for (int c = 0; c < L.D; ++c) delta += g[c] * (ot[c] - ut[c]);
        const A dl = beta * one_minus_beta * delta, dsu = -dl;
        d_lse[r] = dl;
        const A coef = su * ru * ru / static_cast<A>(L.D);
        A* dut = &du[L.row(s, t)];
        A* dot_ = &d_o[L.row(s, t)];
        for (int c = 0; c < L.D; ++c) {
          dot_[c] = one_minus_beta * g[c];
          dut[c] = beta * g[c] + dsu * (ru * ws[c] - coef * ut[c]);
          dw[c] += dsu * ru * ut[c];
        }
      }
    }
  });
  sum_partials(L, dw_partial, d_queries);
}

template <class A>
void phase1_backward(const Dims& dims, const A* v, const A* w, const A* lse, const A* d_o, const A* d_lse, A* dv,
                     A* d_queries) {
  const Layout L(dims);
  const A eps = static_cast<A>(dims.eps);
  std::vector<A> dw_partial(L.tasks() * L.S * L.D, A(0));  // [task, S, D]
  parallel_for(L.tasks(), [&](std::size_t task) {  // per token: all layers' contributions to dv_i in layer order
    std::vector<A> r(L.N), logit(L.N), prob(L.N), a(L.N);
    for (int t = L.token_begin(task); t < L.token_end(task); ++t) {
      for (int i = 0; i < L.N; ++i) {
        r[i] = rms_inverse(&v[L.row(i, t)], L.D, eps);
        std::fill_n(&dv[L.row(i, t)], L.D, A(0));
      }
      for (int s = 0; s < L.S; ++s) {
        const std::size_t rs = L.stat(s, t);
        const A* ws = &w[static_cast<std::size_t>(s) * L.D];
        const A* g = &d_o[L.row(s, t)];
        A abar = 0;
        for (int i = 0; i < L.N; ++i) {
          logit[i] = r[i] * dot(ws, &v[L.row(i, t)], L.D);
          prob[i] = std::exp(logit[i] - lse[rs]);
          a[i] = dot(g, &v[L.row(i, t)], L.D);
          abar += prob[i] * a[i];
        }
        A* dw = &dw_partial[(task * L.S + s) * L.D];
        for (int i = 0; i < L.N; ++i) {
          const A dsi = prob[i] * (a[i] - abar + d_lse[rs]);
          const A coef = logit[i] * r[i] * r[i] / static_cast<A>(L.D);
          const A* vi = &v[L.row(i, t)];
          A* dvi = &dv[L.row(i, t)];
          for (int c = 0; c < L.D; ++c) {
            dvi[c] += prob[i] * g[c] + dsi * (r[i] * ws[c] - coef * vi[c]);
            dw[c] += dsi * r[i] * vi[c];
          }
        }
      }
    }
  });
  sum_partials(L, dw_partial, d_queries);
}

#define FC_ATTNRES_INSTANTIATE(A)                                                                                      \
  template void phase1_forward<A>(const Dims&, const A*, const A*, A*, A*);                                            \
  template void phase2_forward<A>(const Dims&, const A*, const A*, const A*, const A*, A*);                            \
  template void phase2_backward<A>(const Dims&, const A*, const A*, const A*, const A*, const A*, A*, A*, A*, A*);      \
  template void phase1_backward<A>(const Dims&, const A*, const A*, const A*, const A*, const A*, A*, A*);
FC_ATTNRES_INSTANTIATE(float)
FC_ATTNRES_INSTANTIATE(double)
#undef FC_ATTNRES_INSTANTIATE

}  // namespace fc::kernels::cpu::attnres
