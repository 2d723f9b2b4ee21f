// PyTorch's own attention as harness subjects (builtin_subjects.cpp lists them when flashcheck is
// built with libtorch):
//   torch.math         eager matmul + softmax in the policy's dtype, autograd for bwd and bwdbwd: what
//                      a PyTorch user gets without a fused kernel. It computes the same graph as the
//                      harness's same-format baseline (gradcheck/baseline.hpp), so it also checks it.
//   torch.sdpa.flash, torch.sdpa.efficient, torch.sdpa.cudnn
//                      at::scaled_dot_product_attention restricted to one CUDA backend, fwd and bwd
//                      (PyTorch has no double backward for them: issue 116350). Registered only with
//                      libtorch >= 2 and a CUDA device present.
#pragma once

#include <memory>
#include <vector>

#include "kernels/attention_call.hpp"

namespace fc::kernels::pt {

std::unique_ptr<Subject> make_torch_math();
// Empty without libtorch >= 2 or without a CUDA device.
std::vector<std::unique_ptr<Subject>> make_torch_sdpa_subjects();

}  // namespace fc::kernels::pt
