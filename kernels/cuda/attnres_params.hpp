// The parameters of the Attention Residuals kernels (attnres_kernels.cuh, EQUATIONS.md section 4): one
// call's device tensors, each with its storage type, and the workspaces between the kernels.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// A tensor's storage on the device; AttnRes stores each role in its own format (fp32, bf16, fp16), so
// the kernels dispatch per tensor at run time (a uniform branch: the kernels are memory bound).
enum class Elem : std::uint8_t { f32, bf16, f16 };

// A [outer, B, T, D] (or [outer, B, T, 1]) tensor: element (i, b, t, c) at data + i outer + b batch +
// t token + c. `scale`: per-row fp32 scales [outer, B, T] with the same kind of strides (fp16 rows,
// precision/row_scale.hpp), or null.
struct AttnResIn {
  const void* data = nullptr;
  std::int64_t outer = 0, batch = 0, token = 0;
  Elem type = Elem::f32;
  const float* scale = nullptr;
  std::int64_t scale_outer = 0, scale_batch = 0, scale_token = 0;
};
// Outputs are contiguous [outer, B, T, D]; `scale` (fp16 rows) contiguous [outer, B, T].
struct AttnResOut {
  void* data = nullptr;
  Elem type = Elem::f32;
  float* scale = nullptr;
};

// The bits of AttnResParams::nonfinite.
enum AttnResInputBit : unsigned {
  kNonfiniteValues = 1u << 0,
  kNonfiniteQueries = 1u << 1,
  kNonfinitePartial = 1u << 2,
  kNonfiniteO = 1u << 3,
  kNonfiniteLse = 1u << 4,
  kNonfiniteDh = 1u << 5,
  kNonfiniteDo = 1u << 6,
  kNonfiniteDlse = 1u << 7,
};

struct AttnResParams {
  int sources = 1, batch = 1, tokens = 1, dim = 1, layers = 1;  // N, B, T, D, S
  float eps = 1e-6f;
  AttnResIn values, partial, queries;  // [N, B, T, D], [S, B, T, D], [1, 1, S, D] (queries: outer 0, token = S's stride)
  // phase 1 forward: o, lse; phase 2 forward: h from o_in and lse_in (attnres_forward points them at o, lse)
  AttnResOut o, h;      // [S, B, T, D], role o's format
  float* lse = nullptr;  // [S, B, T] fp32
  AttnResIn o_in, dh;             // the stored o (with its scales), the cotangent of h
  const float* lse_in = nullptr;  // [S, B, T] fp32 contiguous
  // bwd; phase 1's reads do (d_o, role grad's format, contiguous [S, B T, D]) and dlse (d_lse)
  AttnResOut d_values, d_partial, d_queries;  // role grad's format
  // bwd workspaces: do between the two backward kernels (role grad's format), dlse (fp32 [S, B T]),
  // and each phase's dw workspace (attnres_dw_workspace_floats: the per-chunk partial sums of d_queries
  // [chunks, S, D], then the lane kernels' coefficients). The phase that runs needs its own; the other
  // one null leaves that phase's part out of d_queries.
  void* d_o = nullptr;
  float* d_lse = nullptr;
  float* dw_phase2 = nullptr;
  float* dw_phase1 = nullptr;
  // When set, the lane kernels (attnres_checks_inputs) OR into it a bit per input that holds a NaN or an
  // Inf (AttnResInputBit), so a caller needs no pass of its own over the inputs. Only an input with one
  // touches it: the outputs do not depend on it.
  unsigned* nonfinite = nullptr;
  OutputRounding rounding;
  // Philox streams: o (role o), h, d_o, d_values (role grad), d_partial, d_queries (attnres_call.hpp)
  std::uint32_t o_stream = 0, h_stream = 0, d_o_stream = 0, d_values_stream = 0, d_partial_stream = 0, d_queries_stream = 0;
};

}  // namespace fc::kernels::cuda
