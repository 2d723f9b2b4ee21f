// Attention Residuals on the CPU: cpu.attnres, phase 1 and phase 2, forward and backward
// (EQUATIONS.md section 4), following the planned CUDA kernels (kernels/cuda, issue 10).
//
// Algorithm. Everything is per token (B T of them), so a task owns a chunk of 64 consecutive tokens.
//   phase 1 forward: for each token, r_i = (|v_i|^2 / D + eps)^-1/2 once per source; for each layer s
//     the N logits s_i = r_i (w_s . v_i), m = max_i s_i, p_i = exp(s_i - m), l = sum_i p_i, o = sum_i
//     p_i v_i / l (sources in order), lse = m + log l. o is stored in o's format (fp16: with a per-row
//     scale), lse in the statistics format.
//   phase 2 forward: from the stored o and lse: s_u = r_u (w . u), beta = 1 / (1 + exp(lse - s_u)),
//     h = o + beta (u - o), stored like o.
//   phase 2 backward: g = dh, do = (1 - beta) g (1 - beta = sigmoid(lse - s_u) evaluated directly, not
//     by subtraction, which loses every digit when beta rounds to 1), stored in the gradient format (the phase-1 backward
//     kernel reads it), dlse = beta (1 - beta) g . (o - u) kept in fp32, du = beta g - dlse (r_u w -
//     s_u r_u^2 u / D), dw += -dlse r_u u.
//   phase 1 backward: p_i = exp(s_i - lse) from the stored lse, a_i = g . v_i, abar = sum p_i a_i,
//     ds_i = p_i (a_i - abar + dlse), dv_i = sum_s [p_i g + ds_i (r_i w_s - s_i r_i^2 v_i / D)],
//     dw_s += sum ds_i r_i v_i.
//   dw is summed without atomics: in each phase's backward, each chunk of 64 tokens writes its own
//   [S, D] partial (tokens in order), the partials are added in chunk order, then phase 2's sum and
//   phase 1's are added. Results do not depend on the thread count. The four kernels are functions of
//   their own (attnres_phases.hpp), which the PyTorch ops call one phase at a time.
//
// Rounding points, against the CUDA kernels:
//   same   inputs in their storage formats; every sum in the accumulation format (fp32) in the orders
//          above (the CUDA kernels use one thread per (token, D-slice) and reduce dot products over D
//          in a fixed tree: see differ); p kept in fp32 (no tensor core: the products are FMAs on
//          CUDA cores, so no storage rounding of p); o and h stored once, per-row fp16 scales chosen
//          from the fp32 row (precision/row_scale.hpp); phase 2 and the backward read the stored o;
//          do stored in the gradient format between the two backward kernels; SR words from the
//          shared Philox streams keyed by the element's logical index (o: role o's stream, h: 32,
//          do: 35, d_values: role grad's, d_partial: 33, d_queries: 34).
//   differ the order of the D-long dot products (|v|^2, w . v, g . v): sequential here, a warp-shuffle
//          tree on the GPU; exp and log (libm here, __expf / __logf there, ~2 ulp of fp32). Both are
//          fp32-ulp effects, far below a bf16 or fp16 storage rounding.
#pragma once

#include <memory>

#include "kernels/attnres_call.hpp"

namespace fc::kernels::cpu {

std::unique_ptr<Subject> make_cpu_attnres();

}  // namespace fc::kernels::cpu
