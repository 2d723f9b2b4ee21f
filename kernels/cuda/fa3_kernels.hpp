// cuda.fa3's kernels (fa3_kernels.cu): FlashAttention-3's forward on Hopper's warpgroup MMA and TMA
// (kernels/cuda/NOTES.md "cuda.fa3, cuda.fa4", step 1: one consumer warpgroup per 64 query rows, no
// warp specialisation yet). bf16, head dim 128. Each entry point checks its launch and throws
// std::runtime_error naming the kernel and the CUDA error.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

bool fa3_supports(const ForwardParams& p);  // bf16, head dim 128, strides TMA can describe

// O and L (natural log) of every (batch, head), as fa2_forward writes them.
void fa3_forward(const ForwardParams& p, cudaStream_t stream);

}  // namespace fc::kernels::cuda
