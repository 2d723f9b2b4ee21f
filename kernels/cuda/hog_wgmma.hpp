// The wgmma form of Flash Hog's passes (hog_wgmma.cuh), used by hog_double_backward where it applies.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// Whether the wgmma passes take this problem: head dim 64, every operand readable by TMA (a 16-byte aligned base,
// strides that are multiples of 8 elements), at most 65535 heads and batches (the grid's y and z).
bool hog_wgmma_supports(const HogParams& p);

// The statistics passes (dd, b; or both at once with p.two_pass), the query output pass (dQ', ddO) and the key
// pass (dK', dV') on wgmma, in order on `stream`; p.delta must already hold D.
void hog_wgmma_passes(const HogParams& p, cudaStream_t stream);

}  // namespace fc::kernels::cuda
