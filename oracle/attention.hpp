// The analytic attention oracle: forward (O, L), backward (dQ, dK, dV, D) and double backward
// (dQ', dK', dV', ddO with dd and b), exactly as EQUATIONS.md sections 1-3 write them, in a chosen
// scalar type (double, quad, mp50), materialising the [Nq, Nk] matrices of each head.
//
// Also the magnitude evaluation: the same formulas on absolute values with every subtraction made
// an addition (P itself is non-negative). It bounds the size of the terms each output is summed
// from, and so its rounding error: for a computation in a type with unit roundoff u,
// |x_computed - x_exact| <= C u x_magnitude, C growing with the lengths of the sums. The self-checks
// state their bounds this way; a bound relative to |x_exact| would fail wherever x cancels to ~0.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "oracle/attention_problem.hpp"
#include "oracle/scalar.hpp"

namespace fc::oracle {

template <class T>
struct AttentionInputs {
  std::span<const T> q, k, v;  // or, as cotangents of the double backward: ddQ, ddK, ddV
};

// Throws std::invalid_argument unless Q, K, V have the sizes p's shape gives ("<prefix>Q ..." names them).
template <class T>
void check_qkv(const AttentionProblem& p, AttentionInputs<T> x, const std::string& prefix = "") {
  check_array(prefix + "Q", x.q, p.shape.q_size());
  check_array(prefix + "K", x.k, p.shape.k_size());
  check_array(prefix + "V", x.v, p.shape.v_size());
}

template <class T>
struct AttentionForward {
  std::vector<T> o;    // [B, Hq, Nq, dv]
  std::vector<T> lse;  // L = m + log sum exp(S - m), [B, Hq, Nq]; -inf for fully masked rows
};

template <class T>
struct AttentionBackward {
  std::vector<T> dq, dk, dv;  // shaped like Q, K, V; dK, dV summed over each kv head's group
  std::vector<T> delta;       // D = rowsum(dO o O), [B, Hq, Nq]
};

template <class T>
struct AttentionDoubleBackward {
  std::vector<T> dq2, dk2, dv2;  // dQ', dK', dV'
  std::vector<T> ddo;            // ddO
  std::vector<T> dd, b;          // the row statistics of EQUATIONS.md section 3, [B, Hq, Nq]
};

// Each throws std::invalid_argument on an invalid problem, wrongly sized or non-finite arrays.
template <class T>
AttentionForward<T> attention_forward(const AttentionProblem& p, AttentionInputs<T> x);
template <class T>
AttentionBackward<T> attention_backward(const AttentionProblem& p, AttentionInputs<T> x, std::span<const T> dout);
template <class T>
AttentionDoubleBackward<T> attention_double_backward(const AttentionProblem& p, AttentionInputs<T> x,
                                                     std::span<const T> dout, AttentionInputs<T> cotangents);

// Magnitudes (in double) of every output, and the largest logit magnitude |s| sum_c |q_ic k_jc|.
struct AttentionMagnitudes {
  std::vector<double> o, delta, dq, dk, dv, dq2, dk2, dv2, ddo;
  double logit_max = 0;
};
AttentionMagnitudes attention_magnitudes(const AttentionProblem& p, AttentionInputs<double> x,
                                         std::span<const double> dout, AttentionInputs<double> cotangents);

// The fastest rate at which any logit s q_i . k_j moves along a direction (a_q, a_k):
// max over visible and masked (i, j) of |s| sum_c (|a_q,ic k_jc| + |q_ic a_k,jc|). Softmax outputs vary
// on that scale, so finite differences along the direction take steps relative to 1 / rate.
double attention_logit_rate(const AttentionProblem& p, std::span<const double> q, std::span<const double> k,
                            std::span<const double> aq, std::span<const double> ak);

#define FC_ORACLE_DECLARE_ATTENTION(T)                                                                         \
  extern template AttentionForward<T> attention_forward<T>(const AttentionProblem&, AttentionInputs<T>);      \
  extern template AttentionBackward<T> attention_backward<T>(const AttentionProblem&, AttentionInputs<T>,     \
                                                             std::span<const T>);                             \
  extern template AttentionDoubleBackward<T> attention_double_backward<T>(                                    \
      const AttentionProblem&, AttentionInputs<T>, std::span<const T>, AttentionInputs<T>);
FC_ORACLE_DECLARE_ATTENTION(double)
FC_ORACLE_DECLARE_ATTENTION(quad)
FC_ORACLE_DECLARE_ATTENTION(mp50)
#undef FC_ORACLE_DECLARE_ATTENTION

}  // namespace fc::oracle
