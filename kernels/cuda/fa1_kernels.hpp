// The FA1 kernels' host entry points (fa1_kernels.cu): each checks its launch and throws
// std::runtime_error naming the kernel and the CUDA error. Head dims 64 and 128.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// O and L (natural log); p.row_state must hold 2 B Hq Nq floats of workspace.
void fa1_forward(const ForwardParams& p, cudaStream_t stream);
// dQ, dK, dV; p.delta must hold B Hq Nq floats and p.dq_accum B Hq Nq d floats of workspace.
void fa1_backward(const BackwardParams& p, cudaStream_t stream);

}  // namespace fc::kernels::cuda
