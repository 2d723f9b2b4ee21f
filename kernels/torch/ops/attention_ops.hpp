// Registration hooks of the `flashcheck` PyTorch library (one TORCH_LIBRARY block, in
// attention_ops.cpp, calls them).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>
#include <torch/library.h>

#include <tuple>

#include "kernels/attention_call.hpp"

namespace fc::kernels::pt::ops {

// An attention call's problem, checked (attention_ops.cpp): shapes, dtypes per policy, one device.
struct Problem {
  AttentionShape shape;
  Mask mask;
  double scale;
  PrecisionPolicy policy;
};
Problem check_problem(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, c10::string_view mask,
                      const c10::optional<double>& scale, const c10::optional<c10::string_view>& policy);
// The forward's saved O, L and the cotangent dO of a backward call, checked against the problem.
void check_saved(const char* op, const Problem& p, const at::Tensor& q, const at::Tensor& o, const at::Tensor& lse,
                 const at::Tensor& dout);

// The CUDA implementations (attention_cuda.cpp): cuda.fa2 for fwd and bwd; a clear error for kernels
// that have no CUDA version yet (the double backward until cuda.hog exists).
std::tuple<at::Tensor, at::Tensor> forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, c10::string_view mask,
                                                c10::optional<double> scale, c10::string_view kernel, c10::optional<c10::string_view> policy);
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                             const at::Tensor& o, const at::Tensor& lse, const at::Tensor& dout,
                                                             c10::string_view mask, c10::optional<double> scale, c10::string_view kernel,
                                                             c10::optional<c10::string_view> policy);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> double_backward_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse, const at::Tensor& dout,
    const c10::optional<at::Tensor>& ddq, const c10::optional<at::Tensor>& ddk, const c10::optional<at::Tensor>& ddv,
    c10::string_view mask, c10::optional<double> scale, c10::string_view kernel, c10::optional<c10::string_view> policy);

// attention(q, k, v, ...) -> o with autograd to second order (attention_autograd.cpp).
void define_attention_autograd(torch::Library& m);
// The AttnRes phase ops and their autograd versions (attnres_ops.cpp).
void define_attnres_ops(torch::Library& m);

}  // namespace fc::kernels::pt::ops
