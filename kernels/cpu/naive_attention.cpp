#include "kernels/cpu/naive_attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/tensor_io.hpp"

namespace fc::kernels {
namespace {

// The formulas of EQUATIONS.md sections 1-3, plainly, in accumulation type A.
template <class A>
class PlainAttention {
 public:
  explicit PlainAttention(const AttentionCall& c) : c_(c), s_(c.shape) {}

  void run(Op op) {
    q_ = read<A>(c_.q), k_ = read<A>(c_.k), v_ = read<A>(c_.v);
    if (op != Op::fwd) dout_ = read<A>(c_.dout);
    if (op == Op::bwdbwd) ddq_ = read<A>(c_.ddq), ddk_ = read<A>(c_.ddk), ddv_ = read<A>(c_.ddv);
    const std::size_t nq = s_.seq_q, nk = s_.seq_k, d = s_.head_dim, dv = s_.head_dim_v;
    o_.assign(size(c_.out_o.empty() ? c_.o : c_.out_o), A(0));
    lse_.assign(static_cast<std::size_t>(s_.batch) * s_.heads_q * nq, A(0));
    if (op != Op::fwd) {
      dq_.assign(q_.size(), A(0)), dk_.assign(k_.size(), A(0)), dv_.assign(v_.size(), A(0));
    }
    if (op == Op::bwdbwd) {
      dq2_.assign(q_.size(), A(0)), dk2_.assign(k_.size(), A(0)), dv2_.assign(v_.size(), A(0)), ddo_.assign(o_.size(), A(0));
    }
    P_.resize(nq * nk);
    const int group = s_.heads_q / s_.heads_kv;
    for (int b = 0; b < s_.batch; ++b) {
      for (int h = 0; h < s_.heads_q; ++h) {
        const std::size_t qh = static_cast<std::size_t>(b) * s_.heads_q + h;
        const std::size_t kh = static_cast<std::size_t>(b) * s_.heads_kv + h / group;
        head(op, qh * nq, kh * nk, nq, nk, d, dv);
      }
    }
    store(op);
  }

 private:
  template <class T>
  static std::vector<T> read(const TensorView& t) {
    if constexpr (std::is_same_v<T, double>) {
      return read_as_double(t);
    } else {
      return read_as_float(t);
    }
  }
  static std::size_t size(const TensorView& t) { return static_cast<std::size_t>(t.elements()); }

  // One query head: rows q0 .. q0+nq of Q (and O, dO, L), rows k0 .. k0+nk of K and V.
  void head(Op op, std::size_t q0, std::size_t k0, std::size_t nq, std::size_t nk, std::size_t d, std::size_t dv) {
    using std::exp;
    using std::log;
    const A s = static_cast<A>(c_.scale);
    for (std::size_t i = 0; i < nq; ++i) {
      A m = -std::numeric_limits<A>::infinity();
      for (std::size_t j = 0; j < nk; ++j) {
        A& x = P_[i * nk + j];
        if (!visible(c_.mask, static_cast<int>(i), static_cast<int>(j), static_cast<int>(nq), static_cast<int>(nk))) {
          x = -std::numeric_limits<A>::infinity();
          continue;
        }
        A dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += q_[(q0 + i) * d + c] * k_[(k0 + j) * d + c];
        x = s * dot;  // S
        if (x > m) m = x;
      }
      if (m == -std::numeric_limits<A>::infinity()) {  // no visible key
        for (std::size_t j = 0; j < nk; ++j) P_[i * nk + j] = 0;
        lse_[q0 + i] = -std::numeric_limits<A>::infinity();
        continue;
      }
      A sum = 0;
      for (std::size_t j = 0; j < nk; ++j) {
        A& x = P_[i * nk + j];
        x = x == -std::numeric_limits<A>::infinity() ? A(0) : exp(x - m);
        sum += x;
      }
      for (std::size_t j = 0; j < nk; ++j) P_[i * nk + j] /= sum;  // P
      lse_[q0 + i] = m + log(sum);
      for (std::size_t c = 0; c < dv; ++c) {
        A acc = 0;
        for (std::size_t j = 0; j < nk; ++j) acc += P_[i * nk + j] * v_[(k0 + j) * dv + c];
        o_[(q0 + i) * dv + c] = acc;  // O = P V
      }
    }
    if (op == Op::fwd) return;

    // dP = dO V^T, D = rowsum(P o dP) (softmax's own backward), dS = s P o (dP - D)
    dP_.assign(nq * nk, A(0)), dS_.assign(nq * nk, A(0)), D_.assign(nq, A(0));
    for (std::size_t i = 0; i < nq; ++i) {
      for (std::size_t j = 0; j < nk; ++j) {
        A dot = 0;
        for (std::size_t c = 0; c < dv; ++c) dot += dout_[(q0 + i) * dv + c] * v_[(k0 + j) * dv + c];
        dP_[i * nk + j] = dot;
        D_[i] += P_[i * nk + j] * dot;
      }
      for (std::size_t j = 0; j < nk; ++j) dS_[i * nk + j] = s * P_[i * nk + j] * (dP_[i * nk + j] - D_[i]);
    }
    matmul_add(dS_.data(), nq, nk, &k_[k0 * d], d, &dq_[q0 * d], false);        // dQ = dS K
    matmul_add(dS_.data(), nq, nk, &q_[q0 * d], d, &dk_[k0 * d], true);         // dK += dS^T Q
    matmul_add(P_.data(), nq, nk, &dout_[q0 * dv], dv, &dv_[k0 * dv], true);    // dV += P^T dO
    if (op == Op::bwd) return;

    // EQUATIONS.md section 3
    std::vector<A> ddS(nq * nk), dPp(nq * nk), dSp(nq * nk), ddP(nq * nk), dd(nq, A(0)), bb(nq, A(0));
    for (std::size_t i = 0; i < nq; ++i) {
      for (std::size_t j = 0; j < nk; ++j) {
        A x = 0, y = 0;
        for (std::size_t c = 0; c < d; ++c) x += ddq_[(q0 + i) * d + c] * k_[(k0 + j) * d + c], y += q_[(q0 + i) * d + c] * ddk_[(k0 + j) * d + c];
        ddS[i * nk + j] = s * (x + y);                 // ddS = s (ddQ K^T + Q ddK^T)
        dd[i] += ddS[i * nk + j] * P_[i * nk + j];     // dd = rowsum(ddS o P)
      }
    }
    for (std::size_t i = 0; i < nq; ++i) {
      for (std::size_t j = 0; j < nk; ++j) {
        A x = 0;
        for (std::size_t c = 0; c < dv; ++c) x += dout_[(q0 + i) * dv + c] * ddv_[(k0 + j) * dv + c];
        const std::size_t ij = i * nk + j;
        dPp[ij] = x - dP_[ij] * dd[i] - ddS[ij] * D_[i] + dP_[ij] * ddS[ij];  // dP'
        bb[i] += dPp[ij] * P_[ij];                                           // b = rowsum(dP' o P)
      }
      for (std::size_t j = 0; j < nk; ++j) {
        const std::size_t ij = i * nk + j;
        ddP[ij] = P_[ij] * (ddS[ij] - dd[i]);  // ddP = P o (ddS - dd)
      }
    }
    for (std::size_t i = 0; i < nq; ++i) {
      for (std::size_t j = 0; j < nk; ++j) dSp[i * nk + j] = s * P_[i * nk + j] * (dPp[i * nk + j] - bb[i]);  // dS'
    }
    matmul_add(dS_.data(), nq, nk, &ddk_[k0 * d], d, &dq2_[q0 * d], false);   // dQ' = dS ddK
    matmul_add(dSp.data(), nq, nk, &k_[k0 * d], d, &dq2_[q0 * d], false);     //     + dS' K
    matmul_add(dS_.data(), nq, nk, &ddq_[q0 * d], d, &dk2_[k0 * d], true);    // dK' += dS^T ddQ
    matmul_add(dSp.data(), nq, nk, &q_[q0 * d], d, &dk2_[k0 * d], true);      //      + dS'^T Q
    matmul_add(ddP.data(), nq, nk, &dout_[q0 * dv], dv, &dv2_[k0 * dv], true); // dV' += ddP^T dO
    matmul_add(P_.data(), nq, nk, &ddv_[k0 * dv], dv, &ddo_[q0 * dv], false);  // ddO = P ddV
    matmul_add(ddP.data(), nq, nk, &v_[k0 * dv], dv, &ddo_[q0 * dv], false);   //     + ddP V
  }

  // out += M X (M: nq x nk, X: nk x w) or out += M^T X (X: nq x w, out: nk x w).
  static void matmul_add(const A* M, std::size_t nq, std::size_t nk, const A* X, std::size_t w, A* out, bool transposed) {
    if (!transposed) {
      for (std::size_t i = 0; i < nq; ++i)
        for (std::size_t j = 0; j < nk; ++j)
          for (std::size_t c = 0; c < w; ++c) out[i * w + c] += M[i * nk + j] * X[j * w + c];
    } else {
      for (std::size_t i = 0; i < nq; ++i)
        for (std::size_t j = 0; j < nk; ++j)
          for (std::size_t c = 0; c < w; ++c) out[j * w + c] += M[i * nk + j] * X[i * w + c];
    }
  }

  void store(Op op) {
    const PrecisionPolicy& p = c_.policy;
    const auto put = [&](const TensorView& t, const std::vector<A>& x, Role role) {
      if (!t.empty()) write_from(t, std::span<const A>(x), p.rounding, p.stream(role));
    };
    if (op == Op::fwd) {
      put(c_.out_o, o_, Role::o);
      put(c_.out_lse, lse_, Role::stats);
    } else if (op == Op::bwd) {
      put(c_.dq, dq_, Role::grad), put(c_.dk, dk_, Role::grad), put(c_.dv, dv_, Role::grad);
    } else {
      put(c_.dq2, dq2_, Role::grad), put(c_.dk2, dk2_, Role::grad), put(c_.dv2, dv2_, Role::grad), put(c_.ddo, ddo_, Role::grad);
    }
  }

  const AttentionCall& c_;
  const AttentionShape s_;
  std::vector<A> q_, k_, v_, dout_, ddq_, ddk_, ddv_, o_, lse_, dq_, dk_, dv_, dq2_, dk2_, dv2_, ddo_;
  std::vector<A> P_, dP_, dS_, D_;
};

class CpuNaive final : public Subject {
 public:
  CpuNaive() {
    info_.name = "cpu.naive";
    info_.description =
        "plain attention: inputs in their storage formats, every intermediate in the accumulation format, outputs "
        "rounded per policy; materialises [Nq, Nk]";
    info_.family = Family::attention;
    info_.ops = {Op::fwd, Op::bwd, Op::bwdbwd};
    info_.formats = {Format::bf16, Format::fp16, Format::fp32, Format::fp64};
    info_.max_head_dim = 256;
    info_.masks = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
    info_.stochastic_rounding = true;
  }
  const SubjectInfo& info() const override { return info_; }
  void run(Op op, const AttentionCall& c) override {
    validate_call(info_, op, c);
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}}) require_finite(*t, info_.name, what);
    if (op != Op::fwd) require_finite(c.dout, info_.name, "dO");
    if (op == Op::bwdbwd) {
      for (auto [t, what] : {std::pair{&c.ddq, "ddQ"}, std::pair{&c.ddk, "ddK"}, std::pair{&c.ddv, "ddV"}}) require_finite(*t, info_.name, what);
    }
    if (c.policy.accumulate == Format::fp64) {
      PlainAttention<double>(c).run(op);
    } else if (c.policy.accumulate == Format::fp32) {
      PlainAttention<float>(c).run(op);
    } else {
      throw SubjectError(info_.name + ": accumulation in " + std::string(fc::name(c.policy.accumulate)) +
                         " is not supported (fp32 or fp64)");
    }
  }

 private:
  SubjectInfo info_;
};

}  // namespace

std::unique_ptr<Subject> make_cpu_naive() { return std::make_unique<CpuNaive>(); }

}  // namespace fc::kernels
