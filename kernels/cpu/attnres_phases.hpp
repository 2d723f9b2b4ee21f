// The four Attention Residuals kernels of cpu.attnres (EQUATIONS.md section 4), one function each, on
// contiguous arrays in the accumulation type A (float or double). cpu.attnres composes them with the
// storage roundings of its policy; the PyTorch ops (kernels/torch) call them one phase at a time.
//
// Layouts (BT = batch x tokens):
//   values [N, BT, D]   queries [S, D]   partial, o, h, d_o, d_partial [S, BT, D]   lse, d_lse [S, BT]
// Every output is overwritten (d_queries too: phase 1's and phase 2's contributions are separate
// outputs, which the caller adds). Results do not depend on the thread count: a task owns 64
// consecutive tokens, and d_queries is summed from per-task partials in task order (no atomics).
#pragma once

namespace fc::kernels::cpu::attnres {

struct Dims {
  int sources = 1;  // N
  int tokens = 1;   // B T
  int dim = 1;      // D
  int layers = 1;   // S
  double eps = 1e-6;
};

// o = sum_i p_i v_i, lse = logsumexp_i s_i with s_i = r_i (w . v_i).
template <class A>
void phase1_forward(const Dims& dims, const A* values, const A* queries, A* o, A* lse);

// h = o + beta (u - o), beta = sigmoid(r_u (w . u) - lse).
template <class A>
void phase2_forward(const Dims& dims, const A* o, const A* lse, const A* partial, const A* queries, A* h);

// From dh: d_o = (1 - beta) dh, d_lse = beta (1 - beta) dh . (o - u), d_partial, and phase 2's part of
// d_queries.
template <class A>
void phase2_backward(const Dims& dims, const A* o, const A* lse, const A* partial, const A* queries, const A* dh, A* d_o,
                     A* d_lse, A* d_partial, A* d_queries);

// From d_o and d_lse (phase 2's, or a user's): d_values and phase 1's part of d_queries.
template <class A>
void phase1_backward(const Dims& dims, const A* values, const A* queries, const A* lse, const A* d_o, const A* d_lse,
                     A* d_values, A* d_queries);

}  // namespace fc::kernels::cpu::attnres
