// Registration hooks of the `flashcheck` PyTorch library (one TORCH_LIBRARY block, in
// attention_ops.cpp, calls them).
#pragma once

#include <torch/library.h>

namespace fc::kernels::pt::ops {

// attention(q, k, v, ...) -> o with autograd to second order (attention_autograd.cpp).
void define_attention_autograd(torch::Library& m);
// The AttnRes phase ops and their autograd versions (attnres_ops.cpp).
void define_attnres_ops(torch::Library& m);

}  // namespace fc::kernels::pt::ops
