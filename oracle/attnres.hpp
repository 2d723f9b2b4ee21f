// The Attention Residuals oracle (EQUATIONS.md section 4): phase 1 (S pseudo-queries attend over N
// completed block outputs, keys RMS-normalised, keys = values) and phase 2 (merge of the running
// partial sum u of the current block), forward and backward; the one-softmax-over-all-sources form
// as an independent cross-check; and magnitudes for error bounds, as for attention.
//
// Layouts (row-major, contiguous): values [N, B, T, D], pseudo-queries w [S, D], phase-1 outputs o
// and partial sums u and outputs h [S, B, T, D], lse [S, B, T].
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "oracle/scalar.hpp"

namespace fc::oracle {

struct AttnResShape {
  int sources = 1;  // N completed block representations
  int batch = 1;    // B
  int tokens = 1;   // T
  int dim = 1;      // D
  int layers = 1;   // S pseudo-queries (the layers of the current block)
  double eps = 1e-6;

  std::size_t values_size() const { return n(sources) * n(batch) * n(tokens) * n(dim); }
  std::size_t queries_size() const { return n(layers) * n(dim); }
  std::size_t outputs_size() const { return n(layers) * n(batch) * n(tokens) * n(dim); }
  std::size_t lse_size() const { return n(layers) * n(batch) * n(tokens); }
  // Throws std::invalid_argument for a dimension below 1 or eps not finite and positive.
  void validate() const;
  std::string to_string() const;  // "N=3 B=1 T=2 D=8 S=2 eps=1e-06"

 private:
  static std::size_t n(int v) { return static_cast<std::size_t>(v); }
};

template <class T>
struct AttnResPhase1 {
  std::vector<T> o;    // [S, B, T, D]: sum_i p_i v_i
  std::vector<T> lse;  // [S, B, T]: logsumexp_i s_i
};

template <class T>
struct AttnResPhase2Grads {
  std::vector<T> d_o, d_lse, d_partial, d_queries;  // d_queries: phase 2's part of dw
};

template <class T>
struct AttnResPhase1Grads {
  std::vector<T> d_values, d_queries;  // d_values summed over the S layers
};

template <class T>
struct AttnResGrads {
  std::vector<T> d_values, d_partial, d_queries;  // of h = phase2(phase1(values, w), u, w)
};

template <class T>
AttnResPhase1<T> attnres_phase1_forward(const AttnResShape& s, std::span<const T> values, std::span<const T> queries);
template <class T>
std::vector<T> attnres_phase2_forward(const AttnResShape& s, std::span<const T> o, std::span<const T> lse,
                                      std::span<const T> partial, std::span<const T> queries);
template <class T>
AttnResPhase2Grads<T> attnres_phase2_backward(const AttnResShape& s, std::span<const T> o, std::span<const T> lse,
                                              std::span<const T> partial, std::span<const T> queries,
                                              std::span<const T> dh);
template <class T>
AttnResPhase1Grads<T> attnres_phase1_backward(const AttnResShape& s, std::span<const T> values,
                                              std::span<const T> queries, std::span<const T> d_o,
                                              std::span<const T> d_lse);
// Both phases: h and the gradients of <dh, h> (phase 2's backward feeding phase 1's, dw summed).
template <class T>
std::vector<T> attnres_forward(const AttnResShape& s, std::span<const T> values, std::span<const T> partial,
                               std::span<const T> queries);
template <class T>
AttnResGrads<T> attnres_backward(const AttnResShape& s, std::span<const T> values, std::span<const T> partial,
                                 std::span<const T> queries, std::span<const T> dh);

// h as one softmax over the N sources and u together: the form phase 1 + phase 2 must equal.
// Plain loops over any scalar with exp, log, sqrt (so forward-mode autodiff can run through it).
template <class S>
void attnres_one_softmax_forward(const AttnResShape& s, const S* values, const S* partial, const S* queries, S* h);

// Magnitudes (double) of h and of the gradients, and the largest logit magnitude r |w| . |v|.
struct AttnResMagnitudes {
  std::vector<double> h, d_values, d_partial, d_queries;
  double logit_max = 0;
};
AttnResMagnitudes attnres_magnitudes(const AttnResShape& s, std::span<const double> values,
                                     std::span<const double> partial, std::span<const double> queries,
                                     std::span<const double> dh);

#define FC_ORACLE_DECLARE_ATTNRES(T)                                                                             \
  extern template AttnResPhase1<T> attnres_phase1_forward<T>(const AttnResShape&, std::span<const T>,           \
                                                             std::span<const T>);                               \
  extern template std::vector<T> attnres_phase2_forward<T>(const AttnResShape&, std::span<const T>,             \
                                                           std::span<const T>, std::span<const T>,              \
                                                           std::span<const T>);                                 \
  extern template AttnResPhase2Grads<T> attnres_phase2_backward<T>(                                             \
      const AttnResShape&, std::span<const T>, std::span<const T>, std::span<const T>, std::span<const T>,      \
      std::span<const T>);                                                                                      \
  extern template AttnResPhase1Grads<T> attnres_phase1_backward<T>(                                             \
      const AttnResShape&, std::span<const T>, std::span<const T>, std::span<const T>, std::span<const T>);     \
  extern template std::vector<T> attnres_forward<T>(const AttnResShape&, std::span<const T>, std::span<const T>, \
                                                    std::span<const T>);                                        \
  extern template AttnResGrads<T> attnres_backward<T>(const AttnResShape&, std::span<const T>,                  \
                                                      std::span<const T>, std::span<const T>, std::span<const T>);
FC_ORACLE_DECLARE_ATTNRES(double)
FC_ORACLE_DECLARE_ATTNRES(quad)
FC_ORACLE_DECLARE_ATTNRES(mp50)
#undef FC_ORACLE_DECLARE_ATTNRES

}  // namespace fc::oracle

#include "oracle/attnres_one_softmax.hpp"
