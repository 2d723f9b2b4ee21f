// The Attention Residuals ops on CUDA tensors (attnres_cuda.cpp): cuda.attnres's kernels one phase at a
// time, on the current stream. attnres_ops.cpp validates the call (shapes, dtypes, devices, eps) and
// calls these for CUDA tensors; they check what only CUDA needs (the dtype: float32, bfloat16 or
// float16; finite values) and raise a clear error in a build without CUDA kernels.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

namespace fc::kernels::pt::ops {

std::tuple<at::Tensor, at::Tensor> attnres_phase1_forward_cuda(const at::Tensor& values, const at::Tensor& queries, double eps);
std::tuple<at::Tensor, at::Tensor> attnres_phase1_backward_cuda(const at::Tensor& values, const at::Tensor& queries, const at::Tensor& lse,
                                                                const at::Tensor& d_o, const at::Tensor& d_lse, double eps);
at::Tensor attnres_phase2_forward_cuda(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial, const at::Tensor& queries,
                                       double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attnres_phase2_backward_cuda(const at::Tensor& o, const at::Tensor& lse,
                                                                                        const at::Tensor& partial, const at::Tensor& queries,
                                                                                        const at::Tensor& dh, double eps);

}  // namespace fc::kernels::pt::ops
