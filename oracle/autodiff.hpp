// Exact directional derivatives of the attention forward by forward-mode automatic
// differentiation (Boost.Math autodiff): no step size, no truncation error, only rounding in T.
//
//   attention_jvp:                 O, L and their derivatives along a direction a:  J a
//   attention_second_directional:  the mixed second derivative d^2/ds dt O(x + s a + t b),
//                                  i.e. the Hessian of each output contracted with a and b.
// With these, <dO, J a> checks a backward (it equals <J^T dO, a>), and
// d/dt <dO + t c, J(x + t b) a> = <c, J a> + <dO, D^2 O[a, b]> checks a double backward.
#pragma once

#include <vector>

#include "oracle/attention.hpp"
#include "oracle/attnres.hpp"

namespace fc::oracle {

template <class T>
struct AttentionJvp {
  std::vector<T> o, lse;
  std::vector<T> o_dot, lse_dot;  // J a
};

template <class T>
AttentionJvp<T> attention_jvp(const AttentionProblem& p, AttentionInputs<T> x, AttentionInputs<T> a);

template <class T>
struct AttentionSecondDirectional {
  std::vector<T> o_ab, lse_ab;  // d^2/ds dt at s = t = 0
};

template <class T>
AttentionSecondDirectional<T> attention_second_directional(const AttentionProblem& p, AttentionInputs<T> x,
                                                           AttentionInputs<T> a, AttentionInputs<T> b);

// Entries of the Hessian-vector product H v of psi(x) = <dO, O(x)>, x = (Q, K, V) flattened in that
// order: (H v)_j = <dO, D^2 O[v, e_j]>, one second-order forward per requested coordinate j (so meant
// for small problems). With v = (ddQ, ddK, ddV) these are exactly the double backward's dQ', dK', dV'
// (and the JVP along v is its ddO). Throws std::invalid_argument for a coordinate out of range.
template <class T>
std::vector<T> attention_hvp(const AttentionProblem& p, AttentionInputs<T> x, std::span<const T> dout,
                             AttentionInputs<T> v, std::span<const std::size_t> coordinates);

// Attention Residuals: h(values, u, w) (both phases) and its derivative along (a_values, a_u, a_w),
// differentiating the one-softmax form.
template <class T>
struct AttnResJvp {
  std::vector<T> h, h_dot;
};
template <class T>
AttnResJvp<T> attnres_jvp(const AttnResShape& s, std::span<const T> values, std::span<const T> partial,
                          std::span<const T> queries, std::span<const T> a_values, std::span<const T> a_partial,
                          std::span<const T> a_queries);

#define FC_ORACLE_DECLARE_AUTODIFF(T)                                                                         \
  extern template AttentionJvp<T> attention_jvp<T>(const AttentionProblem&, AttentionInputs<T>,              \
                                                   AttentionInputs<T>);                                      \
  extern template AttentionSecondDirectional<T> attention_second_directional<T>(                             \
      const AttentionProblem&, AttentionInputs<T>, AttentionInputs<T>, AttentionInputs<T>);         \
  extern template std::vector<T> attention_hvp<T>(const AttentionProblem&, AttentionInputs<T>,               \
                                                  std::span<const T>, AttentionInputs<T>,                    \
                                                  std::span<const std::size_t>);                             \
  extern template AttnResJvp<T> attnres_jvp<T>(const AttnResShape&, std::span<const T>, std::span<const T>, \
                                               std::span<const T>, std::span<const T>, std::span<const T>, \
                                               std::span<const T>);
FC_ORACLE_DECLARE_AUTODIFF(double)
FC_ORACLE_DECLARE_AUTODIFF(quad)
#undef FC_ORACLE_DECLARE_AUTODIFF

}  // namespace fc::oracle
