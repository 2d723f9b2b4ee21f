// The Attention Residuals ops on CUDA tensors (attnres_cuda.cpp): cuda.attnres's kernels one phase at a
// time, on the current stream, each phase's inputs checked for NaN/Inf by its own or a shared report. attnres_ops.cpp validates the call (shapes, dtypes, devices, eps) and
// calls these for CUDA tensors; they check what only CUDA needs (the dtype: float32, bfloat16 or
// float16; finite values) and raise a clear error in a build without CUDA kernels.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

namespace fc::kernels::pt::ops {

// The NaN/Inf report of the inputs of one or more phase launches, read back once. A per-phase op makes
// its own; the block op (attnres_ops.cpp) shares one between its two phases, so that a pass waits for
// the device once rather than once per phase: each wait leaves the device idle while the host issues
// what follows.
class AttnResInputCheck {
 public:
  explicit AttnResInputCheck(const char* op) : op_(op) {}
  const char* op() const { return op_; }
  // Waits for the device where a launch reported into the flag, then raises an error naming the input
  // that holds NaN or Inf.
  void finish();
  at::Tensor flag;  // one int32 on the device, allocated by the first launch that reports into it

 private:
  const char* op_;
};

// `shared`: the check to report into (its owner calls finish); null: the op's own, finished before it returns.
std::tuple<at::Tensor, at::Tensor> attnres_phase1_forward_cuda(const at::Tensor& values, const at::Tensor& queries, double eps,
                                                               AttnResInputCheck* shared = nullptr);
std::tuple<at::Tensor, at::Tensor> attnres_phase1_backward_cuda(const at::Tensor& values, const at::Tensor& queries, const at::Tensor& lse,
                                                                const at::Tensor& d_o, const at::Tensor& d_lse, double eps,
                                                                AttnResInputCheck* shared = nullptr);
at::Tensor attnres_phase2_forward_cuda(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial, const at::Tensor& queries,
                                       double eps, AttnResInputCheck* shared = nullptr);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attnres_phase2_backward_cuda(const at::Tensor& o, const at::Tensor& lse,
                                                                                        const at::Tensor& partial, const at::Tensor& queries,
                                                                                        const at::Tensor& dh, double eps,
                                                                                        AttnResInputCheck* shared = nullptr);

}  // namespace fc::kernels::pt::ops
