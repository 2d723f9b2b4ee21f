// The inputs of a case, drawn from its seed: Q, K, V per the case's distribution, the cotangents
// dO, ddQ, ddK, ddV from N(0, 1); each rounded once (to nearest) to its storage format and laid out
// as the case says. Draws come from Philox streams 256 and up (precision/policy.hpp reserves the
// lower ids for output rounding), so they are the same on any machine.
#pragma once

#include <cstdint>
#include <vector>

#include "gradcheck/attnres_case.hpp"
#include "gradcheck/case.hpp"
#include "gradcheck/tensor.hpp"

namespace fc::gradcheck {

struct CaseInputs {
  Tensor q, k, v, dout, ddq, ddk, ddv;
};

CaseInputs make_inputs(const Case& c);

// AttnRes: values [N, B, T, D], partial [S, B, T, D], queries [1, 1, S, D], dh [S, B, T, D]
// (attnres_case.hpp says how they are drawn), contiguous, from Philox streams 280..283.
struct AttnResInputs {
  Tensor values, partial, queries, dh;
};
AttnResInputs make_attnres_inputs(const AttnResCase& c);
std::array<std::int64_t, 4> attnres_values_shape(const kernels::AttnResShape& s);
std::array<std::int64_t, 4> attnres_rows_shape(const kernels::AttnResShape& s);     // [S, B, T, D]
std::array<std::int64_t, 4> attnres_stats_shape(const kernels::AttnResShape& s);    // [S, B, T, 1]
std::array<std::int64_t, 4> attnres_queries_shape(const kernels::AttnResShape& s);  // [1, 1, S, D]

// n standard normal values from Philox stream `stream` under `seed` (Box-Muller on two words).
std::vector<double> standard_normal(std::uint64_t seed, std::uint32_t stream, std::size_t n);

// Shapes of the [B, H, N, D] tensors of a case.
std::array<std::int64_t, 4> q_shape(const kernels::AttentionShape& s);
std::array<std::int64_t, 4> k_shape(const kernels::AttentionShape& s);
std::array<std::int64_t, 4> v_shape(const kernels::AttentionShape& s);
std::array<std::int64_t, 4> o_shape(const kernels::AttentionShape& s);
std::array<std::int64_t, 4> lse_shape(const kernels::AttentionShape& s);

}  // namespace fc::gradcheck
