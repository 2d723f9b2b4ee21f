// The one description of a call to an Attention Residuals kernel (EQUATIONS.md section 4): shapes,
// precision policy, and strided typed tensors. Like attention_call.hpp, every backend receives this
// and declares what it supports in its SubjectInfo (family attnres).
//
// Tensors are 4-dimensional views (TensorView):
//   values   [N, B, T, D]   the N completed block representations (role v)
//   partial  [S, B, T, D]   each layer's running partial sum u of the current block (role v)
//   queries  [1, 1, S, D]   the S layers' pseudo-queries w (role q)
//   o        [S, B, T, D]   phase 1's output sum_i p_i v_i (role o)
//   lse      [S, B, T, 1]   phase 1's log-sum-exp (role stats)
//   h        [S, B, T, D]   phase 2's output o + beta (u - o) (role o)
//   dh       [S, B, T, D]   the cotangent of h (role dout)
//   d_values, d_partial, d_queries: gradients of <dh, h>, shaped as their primals (role grad)
// A tensor of role o stored in fp16 carries a per-row scale (precision/row_scale.hpp): its true value
// is stored x scale, the scale an fp32 tensor [S, B, T, 1]. Present exactly when o's format is fp16.
#pragma once

#include <string>

#include "kernels/attention_call.hpp"

namespace fc::kernels {

struct AttnResShape {
  int sources = 1;  // N
  int batch = 1;    // B
  int tokens = 1;   // T
  int dim = 1;      // D
  int layers = 1;   // S
  double eps = 1e-6;
};

// One call. Which tensors an op uses:
//   fwd:  values, partial, queries                          -> out_o (+ out_o_scale), out_lse, out_h (+ out_h_scale)
//   bwd:  values, partial, queries, o (+ o_scale), lse, dh  -> d_values, d_partial, d_queries
// fwd runs phase 1 then phase 2 (phase 2 reads the stored o); bwd runs phase 2's backward then phase 1's.
struct AttnResCall {
  AttnResShape shape;
  PrecisionPolicy policy;
  TensorView values, partial, queries, o, o_scale, lse, dh;
  TensorView out_o, out_o_scale, out_lse, out_h, out_h_scale, d_values, d_partial, d_queries;
};

// Random streams for stochastic rounding of the AttnRes outputs and stored intermediates (o, the
// gradient of values use their roles' streams; precision/policy.hpp reserves ids up to 255).
inline RandomStream attnres_h_stream(const PrecisionPolicy& p) { return {p.seed, 32}; }
inline RandomStream attnres_d_partial_stream(const PrecisionPolicy& p) { return {p.seed, 33}; }
inline RandomStream attnres_d_queries_stream(const PrecisionPolicy& p) { return {p.seed, 34}; }
inline RandomStream attnres_d_o_stream(const PrecisionPolicy& p) { return {p.seed, 35}; }

// Whether role-o tensors carry per-row scales under this policy (fp16 storage).
inline bool attnres_scaled_outputs(const PrecisionPolicy& p) { return p.format(Role::o) == Format::fp16; }

// Checks the shape (every dimension >= 1, D within the subject's head-dim limits, eps finite and > 0)
// and the policy; throws SubjectError naming the first problem.
void validate_attnres_problem(const SubjectInfo& info, Op op, const AttnResShape& shape);
// And every tensor's presence, shape and format.
void validate_attnres_call(const SubjectInfo& info, Op op, const AttnResCall& call);

}  // namespace fc::kernels
