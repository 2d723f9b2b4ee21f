// Flash Hog's host entry point (hog_kernels.cu): the attention double backward, checked launches that
// throw std::runtime_error naming the kernel and the CUDA error. Head dims 64 and 128.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_params.hpp"

namespace fc::kernels::cuda {

// dQ', dK', dV', ddO from Q, K, V, O, L, dO and ddQ, ddK, ddV; p.delta, p.dd and p.b must each hold
// B Hq Nq floats of workspace.
void hog_double_backward(const HogParams& p, cudaStream_t stream);

}  // namespace fc::kernels::cuda
