// The FA2 kernels' host entry points (fa2_kernels.cu): each checks its launch and throws
// std::runtime_error naming the kernel and the CUDA error. Head dims: fa2_supports_head_dim.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

bool fa2_supports_head_dim(int d);  // 64 and 128

// O and L (natural log) of every (batch, head).
void fa2_forward(const ForwardParams& p, cudaStream_t stream);
// dQ, dK, dV from Q, K, V, O, dO and L; p.delta must hold B Hq Nq floats of workspace.
void fa2_backward(const BackwardParams& p, cudaStream_t stream);

}  // namespace fc::kernels::cuda
