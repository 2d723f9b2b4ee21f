// Attention Residuals' host entry points (attnres_kernels.cu): checked launches that throw
// std::runtime_error naming the kernel and the CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/attnres_params.hpp"

namespace fc::kernels::cuda {

// Phase 1 then phase 2: o (+ scales), lse, h (+ scales).
void attnres_forward(const AttnResParams& p, cudaStream_t stream);
// Phase 2's backward then phase 1's, then dw: d_values, d_partial, d_queries; p.d_o, p.d_lse,
// p.dw_phase2 and p.dw_phase1 must hold attnres_workspace_bytes(p) in the order listed there.
void attnres_backward(const AttnResParams& p, cudaStream_t stream);

// The chunks of 64 tokens the backward's dw partials are summed over.
int attnres_chunks(const AttnResParams& p);

}  // namespace fc::kernels::cuda
