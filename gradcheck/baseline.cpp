#include "gradcheck/baseline.hpp"

#include <cmath>
#include <limits>

#include "precision/convert.hpp"
#include "precision/half.hpp"
#include "precision/rounding.hpp"

namespace fc::gradcheck {
namespace {

using kernels::Op;

// PyTorch's math SDPA in accumulation type A, every tensor it stores rounded: intermediates to t
// (Q's format), each output to its role's format.
template <class A>
class Baseline {
 public:
  Baseline(const Case& c, const CaseInputs& in)
      : c_(c), t_(c.policy.format(Role::q)), o_fmt_(c.policy.format(Role::o)), grad_fmt_(c.policy.format(Role::grad)) {
    // q_s = q sign(s) sqrt|s|, k_s = k sqrt|s|: S = q_s k_s^T = s q k^T, each scaled copy rounded
    sq_ = static_cast<A>(std::copysign(std::sqrt(std::fabs(c.scale)), c.scale));
    sk_ = static_cast<A>(std::sqrt(std::fabs(c.scale)));
    q_ = scaled(in.q, sq_), k_ = scaled(in.k, sk_), v_ = get(in.v), dout_ = get(in.dout);
    ddq_ = scaled(in.ddq, sq_), ddk_ = scaled(in.ddk, sk_), ddv_ = get(in.ddv);
  }

  BaselineResult run(Op op) {
    const auto& s = c_.shape;
    const std::size_t nq = s.seq_q, nk = s.seq_k, d = s.head_dim, dv = s.head_dim_v;
    BaselineResult r;
    r.o.assign(static_cast<std::size_t>(s.batch) * s.heads_q * nq * dv, 0.0);
    r.lse.assign(static_cast<std::size_t>(s.batch) * s.heads_q * nq, 0.0);
    if (op == Op::bwd) r.dq.assign(q_.size(), 0.0), r.dk.assign(k_.size(), 0.0), r.dv.assign(v_.size(), 0.0);
    if (op == Op::bwdbwd) {
      r.dq2.assign(q_.size(), 0.0), r.dk2.assign(k_.size(), 0.0), r.dv2.assign(v_.size(), 0.0), r.ddo.assign(r.o.size(), 0.0);
    }
    std::vector<A> dk_acc, dv_acc, dk2_acc, dv2_acc;  // a kv head's group sum
    const int group = s.heads_q / s.heads_kv;
    for (int b = 0; b < s.batch; ++b) {
      for (int hk = 0; hk < s.heads_kv; ++hk) {
        const std::size_t k0 = (static_cast<std::size_t>(b) * s.heads_kv + hk) * nk;
        for (int g = 0; g < group; ++g) {
          const std::size_t q0 = (static_cast<std::size_t>(b) * s.heads_q + hk * group + g) * nq;
          Head h = head(op, q0, k0, nq, nk, d, dv, r);
          if (op == Op::bwd) {
            accumulate(dk_acc, h.dk, g == 0), accumulate(dv_acc, h.dv, g == 0);
          } else if (op == Op::bwdbwd) {
            accumulate(dk2_acc, h.dk2, g == 0), accumulate(dv2_acc, h.dv2, g == 0);
          }
        }
        // the gradients of the scaled k_s become those of k at the end: dK = rnd(dK_s sqrt|s|)
        if (op == Op::bwd) put(r.dk, k0 * d, unscale(dk_acc, sk_)), put(r.dv, k0 * dv, dv_acc);
        if (op == Op::bwdbwd) put(r.dk2, k0 * d, unscale(dk2_acc, sk_)), put(r.dv2, k0 * dv, dv2_acc);
      }
    }
    return r;
  }

 private:
  struct Head {
    std::vector<A> dk, dv, dk2, dv2;
  };

  static std::vector<A> get(const Tensor& t) {
    const std::vector<double> x = t.values();
    return std::vector<A>(x.begin(), x.end());
  }
  std::vector<A> scaled(const Tensor& t, A factor) const {
    std::vector<A> x = get(t);
    for (A& e : x) e = rnd(e * factor);
    return x;
  }
  A rnd(A x) const { return round_to_format(x, t_); }
  std::vector<A> rounded_to(std::vector<A> x, Format f) const {
    for (A& e : x) e = round_to_format(e, f);
    return x;
  }
  std::vector<A> unscale(const std::vector<A>& x, A factor) const {
    std::vector<A> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = round_to_format(x[i] * factor, grad_fmt_);
    return out;
  }
  // A framework sums a group's per-head gradients (of repeated K, V) as t tensors.
  void accumulate(std::vector<A>& acc, const std::vector<A>& x, bool first) const {
    if (first) {
      acc = x;
    } else {
      for (std::size_t i = 0; i < x.size(); ++i) acc[i] = rnd(acc[i] + x[i]);
    }
  }
  static void put(std::vector<double>& out, std::size_t offset, const std::vector<A>& x) {
    for (std::size_t i = 0; i < x.size(); ++i) out[offset + i] = static_cast<double>(x[i]);
  }
  // rnd(M X) or rnd(M^T X) for M (nq x nk) and X (nk x w, or nq x w): one product, fp32 accumulation.
  std::vector<A> product(const std::vector<A>& M, std::size_t nq, std::size_t nk, const A* X, std::size_t w, bool transposed) const {
    std::vector<A> out((transposed ? nk : nq) * w, A(0));
    for (std::size_t i = 0; i < nq; ++i)
      for (std::size_t j = 0; j < nk; ++j)
        for (std::size_t c = 0; c < w; ++c) {
          if (transposed) {
            out[j * w + c] += M[i * nk + j] * X[i * w + c];
          } else {
            out[i * w + c] += M[i * nk + j] * X[j * w + c];
          }
        }
    for (A& x : out) x = rnd(x);
    return out;
  }
  // rnd(X Y^T) for row blocks X (n1 x w) and Y (n2 x w).
  std::vector<A> product_nt(const A* X, std::size_t n1, const A* Y, std::size_t n2, std::size_t w) const {
    std::vector<A> out(n1 * n2);
    for (std::size_t i = 0; i < n1; ++i)
      for (std::size_t j = 0; j < n2; ++j) {
        A acc = 0;
        for (std::size_t c = 0; c < w; ++c) acc += X[i * w + c] * Y[j * w + c];
        out[i * n2 + j] = rnd(acc);
      }
    return out;
  }
  std::vector<A> sum(const std::vector<A>& a, const std::vector<A>& b) const {
    std::vector<A> out(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) out[i] = rnd(a[i] + b[i]);
    return out;
  }

  Head head(Op op, std::size_t q0, std::size_t k0, std::size_t nq, std::size_t nk, std::size_t d, std::size_t dv,
            BaselineResult& r) const {
    using std::exp;
    using std::log;
    const A minus_inf = -std::numeric_limits<A>::infinity();
    // S = rnd(q_s k_s^T), masked; P = rnd(softmax(S)) (evaluated in fp32 from t values); O = rnd(P V)
    std::vector<A> S = product_nt(&q_[q0 * d], nq, &k_[k0 * d], nk, d);
    std::vector<A> P(nq * nk, A(0));
    for (std::size_t i = 0; i < nq; ++i) {
      A m = minus_inf;
      for (std::size_t j = 0; j < nk; ++j) {
        A& x = S[i * nk + j];
        if (!kernels::visible(c_.mask, static_cast<int>(i), static_cast<int>(j), static_cast<int>(nq), static_cast<int>(nk))) x = minus_inf;
        if (x > m) m = x;
      }
      if (m == minus_inf) {
        r.lse[q0 + i] = -std::numeric_limits<double>::infinity();
        continue;
      }
      A z = 0;
      for (std::size_t j = 0; j < nk; ++j) z += S[i * nk + j] == minus_inf ? A(0) : exp(S[i * nk + j] - m);
      for (std::size_t j = 0; j < nk; ++j) P[i * nk + j] = S[i * nk + j] == minus_inf ? A(0) : rnd(exp(S[i * nk + j] - m) / z);
      r.lse[q0 + i] = static_cast<double>(m + log(z));  // L from the rounded logits (a flash kernel's statistic)
    }
    put(r.o, q0 * dv, rounded_to(product(P, nq, nk, &v_[k0 * dv], dv, false), o_fmt_));
    Head h;
    if (op == Op::fwd) return h;

    // dP = rnd(dO V^T); softmax's backward dS = rnd(P o (dP - D)), D = rowsum(P o dP) in fp32;
    // dQ_s = rnd(dS K_s), dK_s = rnd(dS^T Q_s), then dQ = rnd(dQ_s sign(s) sqrt|s|), dV = rnd(P^T dO)
    const std::vector<A> dP = product_nt(&dout_[q0 * dv], nq, &v_[k0 * dv], nk, dv);
    std::vector<A> D(nq, A(0)), dS(nq * nk);
    for (std::size_t i = 0; i < nq; ++i) {
      for (std::size_t j = 0; j < nk; ++j) D[i] += P[i * nk + j] * dP[i * nk + j];
      for (std::size_t j = 0; j < nk; ++j) dS[i * nk + j] = rnd(P[i * nk + j] * (dP[i * nk + j] - D[i]));
    }
    if (op == Op::bwd) {
      put(r.dq, q0 * d, unscale(product(dS, nq, nk, &k_[k0 * d], d, false), sq_));
      h.dk = product(dS, nq, nk, &q_[q0 * d], d, true);
      h.dv = rounded_to(product(P, nq, nk, &dout_[q0 * dv], dv, true), grad_fmt_);
      return h;
    }

    // The double backward of the same graph (EQUATIONS.md section 3 in the scaled coordinates, the
    // cotangents of dq_s, dk_s being ddq sign(s) sqrt|s| and ddk sqrt|s|), every tensor rounded.
    const std::vector<A> ddS = sum(product_nt(&ddq_[q0 * d], nq, &k_[k0 * d], nk, d), product_nt(&q_[q0 * d], nq, &ddk_[k0 * d], nk, d));
    const std::vector<A> X = product_nt(&dout_[q0 * dv], nq, &ddv_[k0 * dv], nk, dv);
    std::vector<A> dPp(nq * nk), dSp(nq * nk), ddP(nq * nk), dd(nq, A(0)), bb(nq, A(0));
    for (std::size_t i = 0; i < nq; ++i) {
      for (std::size_t j = 0; j < nk; ++j) dd[i] += ddS[i * nk + j] * P[i * nk + j];
      for (std::size_t j = 0; j < nk; ++j) {
        const std::size_t ij = i * nk + j;
        dPp[ij] = rnd(X[ij] - dP[ij] * dd[i] - ddS[ij] * D[i] + dP[ij] * ddS[ij]);
        bb[i] += dPp[ij] * P[ij];
        ddP[ij] = rnd(P[ij] * (ddS[ij] - dd[i]));
      }
      for (std::size_t j = 0; j < nk; ++j) dSp[i * nk + j] = rnd(P[i * nk + j] * (dPp[i * nk + j] - bb[i]));
    }
    put(r.dq2, q0 * d, unscale(sum(product(dS, nq, nk, &ddk_[k0 * d], d, false), product(dSp, nq, nk, &k_[k0 * d], d, false)), sq_));
    put(r.ddo, q0 * dv,
        rounded_to(sum(product(P, nq, nk, &ddv_[k0 * dv], dv, false), product(ddP, nq, nk, &v_[k0 * dv], dv, false)), grad_fmt_));
    h.dk2 = sum(product(dS, nq, nk, &ddq_[q0 * d], d, true), product(dSp, nq, nk, &q_[q0 * d], d, true));
    h.dv2 = rounded_to(product(ddP, nq, nk, &dout_[q0 * dv], dv, true), grad_fmt_);
    return h;
  }

  const Case& c_;
  const Format t_, o_fmt_, grad_fmt_;
  A sq_ = 1, sk_ = 1;
  std::vector<A> q_, k_, v_, dout_, ddq_, ddk_, ddv_;
};

}  // namespace

BaselineResult baseline(const Case& c, const CaseInputs& in, Op op) {
  if (c.policy.accumulate == Format::fp64 || c.policy.format(Role::q) == Format::fp64) return Baseline<double>(c, in).run(op);
  return Baseline<float>(c, in).run(op);
}

}  // namespace fc::gradcheck
