#include "gradcheck/attnres_baseline.hpp"

#include <cmath>

#include "precision/convert.hpp"
#include "precision/row_scale.hpp"

namespace fc::gradcheck {
namespace {

template <class A>
class Baseline {
 public:
  Baseline(const AttnResCase& c, const AttnResInputs& in)
      : s_(c.shape), t_(c.policy.format(Role::v)), o_fmt_(c.policy.format(Role::o)), stats_fmt_(c.policy.format(Role::stats)),
        grad_fmt_(c.policy.format(Role::grad)) {
    const auto get = [](const Tensor& x) {
      const std::vector<double> d = x.values();
      return std::vector<A>(d.begin(), d.end());
    };
    v_ = get(in.values), u_ = get(in.partial), w_ = get(in.queries), dh_ = get(in.dh);
    N_ = s_.sources, BT_ = s_.batch * s_.tokens, D_ = s_.dim, S_ = s_.layers;
  }

  AttnResBaselineResult run(kernels::Op op) {
    AttnResBaselineResult r;
    const std::size_t rows = static_cast<std::size_t>(S_) * BT_;
    r.o.resize(rows * D_), r.lse.resize(rows), r.h.resize(rows * D_);
    std::vector<A> dv(v_.size(), A(0)), du(u_.size()), dw(w_.size(), A(0));
    std::vector<A> r_src(N_), logit(N_), p(N_), k(static_cast<std::size_t>(N_) * D_), o(D_), ku(D_), diff(D_), h(D_);
    std::vector<A> t1(D_), d_o(D_), dk(D_), dp(N_), dlogit(N_);
    for (int t = 0; t < BT_; ++t) {
      for (int i = 0; i < N_; ++i) {
        r_src[i] = rms_inverse(src(i, t));
        for (int c = 0; c < D_; ++c) k[i * D_ + c] = rnd(src(i, t)[c] * r_src[i]);
      }
      for (int s = 0; s < S_; ++s) {
        const A* w = &w_[static_cast<std::size_t>(s) * D_];
        const std::size_t row = static_cast<std::size_t>(s) * BT_ + t;
        // phase 1
        A m = -INFINITY;
        for (int i = 0; i < N_; ++i) logit[i] = rnd(dot(w, &k[i * D_])), m = std::max(m, logit[i]);
        A z = 0;
        for (int i = 0; i < N_; ++i) z += std::exp(logit[i] - m);
        for (int i = 0; i < N_; ++i) p[i] = rnd(std::exp(logit[i] - m) / z);
        const A lse = round_to_format(m + std::log(z), stats_fmt_);
        for (int c = 0; c < D_; ++c) {
          A acc = 0;
          for (int i = 0; i < N_; ++i) acc += p[i] * src(i, t)[c];
          o[c] = acc;
        }
        store_row(o.data(), o_fmt_);
        // phase 2
        const A* u = &u_[row * D_];
        const A ru = rms_inverse(u);
        for (int c = 0; c < D_; ++c) ku[c] = rnd(u[c] * ru);
        const A su = rnd(dot(w, ku.data()));
        const A beta = rnd(A(1) / (A(1) + std::exp(lse - su)));
        for (int c = 0; c < D_; ++c) diff[c] = rnd(u[c] - o[c]), h[c] = o[c] + rnd(beta * diff[c]);
        store_row(h.data(), o_fmt_);
        for (int c = 0; c < D_; ++c) r.o[row * D_ + c] = static_cast<double>(o[c]), r.h[row * D_ + c] = static_cast<double>(h[c]);
        r.lse[row] = static_cast<double>(lse);
        if (op == kernels::Op::fwd) continue;

        // phase 2 backward: h = o + beta diff, diff = u - o, beta = sigmoid(s_u - lse), s_u = w . rmsnorm(u)
        const A* g = &dh_[row * D_];
        A dbeta = 0;
        for (int c = 0; c < D_; ++c) t1[c] = rnd(beta * g[c]), d_o[c] = rnd(g[c] - t1[c]), dbeta += g[c] * diff[c];
        const A dzu = rnd(rnd(dbeta) * beta * (A(1) - beta));
        const A dlse = -dzu;
        for (int c = 0; c < D_; ++c) dk[c] = rnd(dzu * w[c]), dw[static_cast<std::size_t>(s) * D_ + c] += dzu * ku[c];
        rms_backward(u, ru, dk.data(), &du[row * D_]);
        for (int c = 0; c < D_; ++c) du[row * D_ + c] = rnd(t1[c] + du[row * D_ + c]);
        // phase 1 backward: o = sum p_i v_i, p = softmax(logits), lse = logsumexp(logits), logits = w . rmsnorm(v_i)
        A pdp = 0;
        for (int i = 0; i < N_; ++i) dp[i] = rnd(dot(d_o.data(), src(i, t))), pdp += p[i] * dp[i];
        for (int i = 0; i < N_; ++i) dlogit[i] = rnd(rnd(p[i] * (dp[i] - pdp)) + rnd(p[i] * dlse));
        for (int i = 0; i < N_; ++i) {
          A* dvi = &dv[(static_cast<std::size_t>(i) * BT_ + t) * D_];
          for (int c = 0; c < D_; ++c) dk[c] = rnd(dlogit[i] * w[c]), dw[static_cast<std::size_t>(s) * D_ + c] += dlogit[i] * k[i * D_ + c];
          std::vector<A> through_norm(D_);
          rms_backward(src(i, t), r_src[i], dk.data(), through_norm.data());
          // autograd adds the direct (p_i do) and the through-the-norm gradients, and the layers', as t tensors
          for (int c = 0; c < D_; ++c) dvi[c] = rnd(dvi[c] + rnd(rnd(p[i] * d_o[c]) + through_norm[c]));
        }
      }
    }
    if (op == kernels::Op::bwd) {
      r.d_values = out(dv), r.d_partial = out(du), r.d_queries = out(dw);
    }
    return r;
  }

 private:
  A rnd(A x) const { return round_to_format(x, t_); }
  const A* src(int i, int t) const { return &v_[(static_cast<std::size_t>(i) * BT_ + t) * D_]; }
  A dot(const A* a, const A* b) const {
    A acc = 0;
    for (int c = 0; c < D_; ++c) acc += a[c] * b[c];
    return acc;
  }
  A rms_inverse(const A* x) const { return A(1) / std::sqrt(dot(x, x) / static_cast<A>(D_) + static_cast<A>(s_.eps)); }
  // d/dx of k = x r(x), r = (|x|^2 / D + eps)^-1/2, against dk: r dk - r^3 x (x . dk) / D, rounded
  void rms_backward(const A* x, A r, const A* dk, A* dx) const {
    const A xdk = dot(x, dk);
    for (int c = 0; c < D_; ++c) dx[c] = rnd(r * dk[c] - r * r * r * x[c] * xdk / static_cast<A>(D_));
  }
  // A row stored as the policy stores o: fp16 through a per-row scale, other formats directly.
  void store_row(A* x, Format f) const {
    const double scale = f == Format::fp16 ? fp16_row_scale_of(x, static_cast<std::size_t>(D_)) : 1.0;
    for (int c = 0; c < D_; ++c) x[c] = static_cast<A>(round_to_format(static_cast<A>(x[c] / scale), f) * scale);
  }
  std::vector<double> out(const std::vector<A>& x) const {
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<double>(round_to_format(x[i], grad_fmt_));
    return y;
  }

  const kernels::AttnResShape s_;
  const Format t_, o_fmt_, stats_fmt_, grad_fmt_;
  int N_ = 1, BT_ = 1, D_ = 1, S_ = 1;
  std::vector<A> v_, u_, w_, dh_;
};

}  // namespace

AttnResBaselineResult attnres_baseline(const AttnResCase& c, const AttnResInputs& in, kernels::Op op) {
  if (c.policy.accumulate == Format::fp64 || c.policy.format(Role::v) == Format::fp64) return Baseline<double>(c, in).run(op);
  return Baseline<float>(c, in).run(op);
}

}  // namespace fc::gradcheck
