// Attention Residuals' host entry points (attnres_kernels.cu): checked launches that throw
// std::runtime_error naming the kernel and the CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/attnres_params.hpp"

namespace fc::kernels::cuda {

// Phase 1 then phase 2: o (+ scales), lse, h (+ scales); o_in and lse_in are set to o and lse.
void attnres_forward(AttnResParams p, cudaStream_t stream);
// Phase 2's backward then phase 1's, then dw: d_values, d_partial, d_queries; p.d_o, p.d_lse,
// p.dw_phase2 and p.dw_phase1 are workspaces (attnres_params.hpp gives their sizes).
void attnres_backward(const AttnResParams& p, cudaStream_t stream);

// The phases one at a time (the PyTorch ops): phase 1's forward (o, lse), phase 2's (h from o_in,
// lse_in); phase 2's backward (d_o, d_lse, d_partial, and in d_queries phase 2's part: p.dw_phase2
// its workspace, p.dw_phase1 null), phase 1's (d_values, and in d_queries phase 1's part from d_o and
// d_lse: p.dw_phase1 its workspace, p.dw_phase2 null).
void attnres_phase1_forward(const AttnResParams& p, cudaStream_t stream);
void attnres_phase2_forward(const AttnResParams& p, cudaStream_t stream);
void attnres_phase2_backward(const AttnResParams& p, cudaStream_t stream);
void attnres_phase1_backward(const AttnResParams& p, cudaStream_t stream);

enum class AttnResPhase { phase1_forward, phase2_forward, phase2_backward, phase1_backward };
// Whether that phase's launch for p takes the lane kernels, which find NaN and Inf in every input they
// read and report them through p.nonfinite (attnres_params.hpp); the block kernels do not, so their
// callers check the inputs themselves.
bool attnres_checks_inputs(const AttnResParams& p, AttnResPhase phase);

// The chunks of 64 tokens the backward's dw partials are summed over.
int attnres_chunks(const AttnResParams& p);
// The floats of each dw workspace (p.dw_phase2, p.dw_phase1): the chunks' partials [chunks, S, D], then
// the lane kernels' coefficients (phase 2: [S, B T]; phase 1: [B T, S, N]).
std::size_t attnres_dw_workspace_floats(const AttnResParams& p);

}  // namespace fc::kernels::cuda
