// Implementation of attention.hpp, included by the one .cpp file per scalar type that instantiates
// it (attention_fp64.cpp, attention_quad.cpp, attention_mp50.cpp) and by attention_magnitudes.cpp.
#pragma once

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "oracle/attention.hpp"
#include "oracle/parallel.hpp"

namespace fc::oracle::detail {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T>
using ConstMap = Eigen::Map<const Mat<T>>;

enum class Level { forward, backward, double_backward };

// Pointers to the whole problem's arrays. Inputs not needed at a level, and outputs not wanted, are
// null.
template <class T>
struct Arrays {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  const T *ddq = nullptr, *ddk = nullptr, *ddv = nullptr;
  T *o = nullptr, *lse = nullptr, *delta = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  T *dq2 = nullptr, *dk2 = nullptr, *dv2 = nullptr, *ddo = nullptr, *dd = nullptr, *b = nullptr;
};

// S is overwritten by P = exp(S - L 1^T) on visible entries (0 elsewhere); lse receives L.
// Fully masked rows: P = 0, L = -inf (EQUATIONS.md section 1).
template <class T>
void softmax_rows(const AttentionProblem& p, Mat<T>& S, T* lse) {
  using std::exp;
  using std::log;
  for (int i = 0; i < S.rows(); ++i) {
    bool any = false;
    T m = 0;
    for (int j = 0; j < S.cols(); ++j) {
      if (p.visible(i, j) && (!any || S(i, j) > m)) {
        m = S(i, j);
        any = true;
      }
    }
    if (!any) {
      S.row(i).setZero();
      if (lse) lse[i] = -std::numeric_limits<T>::infinity();
      continue;
    }
    T sum = 0;
    for (int j = 0; j < S.cols(); ++j) {
      if (p.visible(i, j)) {
        S(i, j) = exp(S(i, j) - m);
        sum += S(i, j);
      } else {
        S(i, j) = 0;
      }
    }
    // exp(S - m) / sum equals exp(S - L) with L = m + log(sum), the form EQUATIONS.md writes.
    S.row(i) /= sum;
    if (lse) lse[i] = m + log(sum);
  }
}

// M - r 1^T (or, for magnitudes, M + r 1^T): subtract a per-row value from every column.
template <bool kMagnitude, class T>
Mat<T> minus_rows(const Mat<T>& M, const Vec<T>& r) {
  if constexpr (kMagnitude) {
    return (M.array().colwise() + r.array()).matrix();
  } else {
    return (M.array().colwise() - r.array()).matrix();
  }
}

template <bool kMagnitude, class T>
Mat<T> minus(const Mat<T>& a, const Mat<T>& b) {
  if constexpr (kMagnitude) {
    return a + b;
  } else {
    return a - b;
  }
}

// One query head against its kv head: the formulas of EQUATIONS.md sections 1-3, in order.
template <class T>
struct HeadResult {
  Mat<T> o, dq, dk, dv, dq2, dk2, dv2, ddo;
  Vec<T> delta, dd, b;
};

template <bool kMagnitude, class T>
void head_compute(Level level, const Mat<T>& P, const T& s, const ConstMap<T>& Q, const ConstMap<T>& K,
                  const ConstMap<T>& V, const T* dout, const T* ddq, const T* ddk, const T* ddv, HeadResult<T>& r) {
  r.o = P * V;  // O = P V
  if (level == Level::forward) return;
  const ConstMap<T> dO(dout, P.rows(), V.cols());
  const Mat<T> dP = dO * V.transpose();                                   // dP = dO V^T
  r.delta = (dO.array() * r.o.array()).rowwise().sum().matrix();          // D = rowsum(dO o O)
  const Mat<T> dS = (P.array() * minus_rows<kMagnitude>(dP, r.delta).array()).matrix() * s;  // s P o (dP - D)
  r.dq = dS * K;               // dQ = dS K
  r.dk = dS.transpose() * Q;   // dK = dS^T Q
  r.dv = P.transpose() * dO;   // dV = P^T dO
  if (level == Level::backward) return;

  const ConstMap<T> ddQ(ddq, Q.rows(), Q.cols()), ddK(ddk, K.rows(), K.cols()), ddV(ddv, V.rows(), V.cols());
  const Mat<T> ddS = (ddQ * K.transpose() + Q * ddK.transpose()) * s;       // ddS = s (ddQ K^T + Q ddK^T)
  r.dd = (ddS.array() * P.array()).rowwise().sum().matrix();               // dd = rowsum(ddS o P)
  // dP' = dO ddV^T - dP o (dd 1^T) - ddS o (D 1^T) + dP o ddS
  const Mat<T> dP_dd = (dP.array().colwise() * r.dd.array()).matrix();
  const Mat<T> ddS_D = (ddS.array().colwise() * r.delta.array()).matrix();
  const Mat<T> dPp = minus<kMagnitude>(minus<kMagnitude>(Mat<T>(dO * ddV.transpose()), dP_dd), ddS_D) +
                     (dP.array() * ddS.array()).matrix();
  r.b = (dPp.array() * P.array()).rowwise().sum().matrix();                // b = rowsum(dP' o P)
  const Mat<T> dSp = (P.array() * minus_rows<kMagnitude>(dPp, r.b).array()).matrix() * s;  // s P o (dP' - b)
  const Mat<T> ddP = (P.array() * minus_rows<kMagnitude>(ddS, r.dd).array()).matrix();     // P o (ddS - dd)
  r.dq2 = dS * ddK + dSp * K;                          // dQ' = dS ddK + dS' K
  r.dk2 = dS.transpose() * ddQ + dSp.transpose() * Q;  // dK' = dS^T ddQ + dS'^T Q
  r.dv2 = ddP.transpose() * dO;                        // dV' = ddP^T dO
  r.ddo = P * ddV + ddP * V;                           // ddO = P ddV + ddP V
}

template <class T, class M>
void store(T* dst, const M& m) {
  if (dst) std::copy(m.data(), m.data() + m.size(), dst);
}

// Runs every head. `signed_x` gives the logits (P is always the true softmax); `a` holds the linear
// inputs, which in magnitude mode are absolute values. logit_max receives max |s| sum_c |q k|.
template <bool kMagnitude, class T>
void run_heads(const AttentionProblem& p, Level level, const T* signed_q, const T* signed_k, const Arrays<T>& a,
               double* logit_max = nullptr) {
  const AttentionShape& sh = p.shape;
  const int nq = sh.seq_q, nk = sh.seq_k, d = sh.head_dim, dv = sh.head_dim_v, group = sh.group();
  const T s = kMagnitude ? T(std::fabs(p.scale)) : T(p.scale);
  const auto tasks = static_cast<std::size_t>(sh.batch) * static_cast<std::size_t>(sh.heads_kv);
  std::vector<double> task_logit_max(tasks, 0.0);
  parallel_for(tasks, [&](std::size_t task) {
    const std::size_t b = task / static_cast<std::size_t>(sh.heads_kv), hkv = task % static_cast<std::size_t>(sh.heads_kv);
    const std::size_t kv_head = b * sh.heads_kv + hkv;
    const ConstMap<T> K(a.k + kv_head * nk * d, nk, d), V(a.v + kv_head * nk * dv, nk, dv);
    const ConstMap<T> Ks(signed_k + kv_head * nk * d, nk, d);
    Mat<T> dk_sum, dv_sum, dk2_sum, dv2_sum;  // the group's sums, in head order
    for (int g = 0; g < group; ++g) {
      const std::size_t q_head = b * sh.heads_q + hkv * group + g;
      const std::size_t row0 = q_head * nq;
      const ConstMap<T> Q(a.q + row0 * d, nq, d), Qs(signed_q + row0 * d, nq, d);
      Mat<T> P = (Qs * Ks.transpose()) * T(p.scale);
      softmax_rows(p, P, kMagnitude ? nullptr : (a.lse ? a.lse + row0 : nullptr));
      if constexpr (kMagnitude) {
        const Mat<T> logit_mag = (Q * K.transpose()) * s;
        task_logit_max[task] = std::max(task_logit_max[task], static_cast<double>(logit_mag.maxCoeff()));
      }
      HeadResult<T> r;
      const auto at = [](auto* base, std::size_t offset) { return base ? base + offset : nullptr; };
      head_compute<kMagnitude>(level, P, s, Q, K, V, at(a.dout, row0 * dv), at(a.ddq, row0 * d), at(a.ddk, kv_head * nk * d),
                               at(a.ddv, kv_head * nk * dv), r);
      store(at(a.o, row0 * dv), r.o);
      if (level == Level::forward) continue;
      store(at(a.delta, row0), r.delta);
      store(at(a.dq, row0 * d), r.dq);
      dk_sum = g == 0 ? r.dk : Mat<T>(dk_sum + r.dk);
      dv_sum = g == 0 ? r.dv : Mat<T>(dv_sum + r.dv);
      if (level == Level::backward) continue;
      store(at(a.dq2, row0 * d), r.dq2);
      store(at(a.ddo, row0 * dv), r.ddo);
      store(at(a.dd, row0), r.dd);
      store(at(a.b, row0), r.b);
      dk2_sum = g == 0 ? r.dk2 : Mat<T>(dk2_sum + r.dk2);
      dv2_sum = g == 0 ? r.dv2 : Mat<T>(dv2_sum + r.dv2);
    }
    if (level == Level::forward) return;
    store(a.dk ? a.dk + kv_head * nk * d : nullptr, dk_sum);
    store(a.dv ? a.dv + kv_head * nk * dv : nullptr, dv_sum);
    if (level == Level::backward) return;
    store(a.dk2 ? a.dk2 + kv_head * nk * d : nullptr, dk2_sum);
    store(a.dv2 ? a.dv2 + kv_head * nk * dv : nullptr, dv2_sum);
  });
  if (logit_max) *logit_max = *std::max_element(task_logit_max.begin(), task_logit_max.end());
}

}  // namespace fc::oracle::detail

namespace fc::oracle {

template <class T>
AttentionForward<T> attention_forward(const AttentionProblem& p, AttentionInputs<T> x) {
  p.validate();
  check_qkv(p, x);
  AttentionForward<T> out{std::vector<T>(p.shape.o_size()), std::vector<T>(p.shape.row_size())};
  detail::Arrays<T> a;
  a.q = x.q.data(), a.k = x.k.data(), a.v = x.v.data();
  a.o = out.o.data(), a.lse = out.lse.data();
  detail::run_heads<false>(p, detail::Level::forward, a.q, a.k, a);
  return out;
}

template <class T>
AttentionBackward<T> attention_backward(const AttentionProblem& p, AttentionInputs<T> x, std::span<const T> dout) {
  p.validate();
  check_qkv(p, x);
  check_array("dO", dout, p.shape.o_size());
  AttentionBackward<T> out{std::vector<T>(p.shape.q_size()), std::vector<T>(p.shape.k_size()),
                           std::vector<T>(p.shape.v_size()), std::vector<T>(p.shape.row_size())};
  detail::Arrays<T> a;
  a.q = x.q.data(), a.k = x.k.data(), a.v = x.v.data(), a.dout = dout.data();
  a.dq = out.dq.data(), a.dk = out.dk.data(), a.dv = out.dv.data(), a.delta = out.delta.data();
  detail::run_heads<false>(p, detail::Level::backward, a.q, a.k, a);
  return out;
}

template <class T>
AttentionDoubleBackward<T> attention_double_backward(const AttentionProblem& p, AttentionInputs<T> x,
                                                     std::span<const T> dout, AttentionInputs<T> c) {
  p.validate();
  check_qkv(p, x);
  check_array("dO", dout, p.shape.o_size());
  check_qkv(p, c, "dd");
  AttentionDoubleBackward<T> out{std::vector<T>(p.shape.q_size()), std::vector<T>(p.shape.k_size()),
                                 std::vector<T>(p.shape.v_size()), std::vector<T>(p.shape.o_size()),
                                 std::vector<T>(p.shape.row_size()), std::vector<T>(p.shape.row_size())};
  detail::Arrays<T> a;
  a.q = x.q.data(), a.k = x.k.data(), a.v = x.v.data(), a.dout = dout.data();
  a.ddq = c.q.data(), a.ddk = c.k.data(), a.ddv = c.v.data();
  a.dq2 = out.dq2.data(), a.dk2 = out.dk2.data(), a.dv2 = out.dv2.data(), a.ddo = out.ddo.data();
  a.dd = out.dd.data(), a.b = out.b.data();
  detail::run_heads<false>(p, detail::Level::double_backward, a.q, a.k, a);
  return out;
}

}  // namespace fc::oracle
