// torch.math: attention as a PyTorch user computes it without a fused kernel (attention_graph.hpp),
// its gradients and second derivatives by autograd (EQUATIONS.md sections 2 and 3 are what autograd
// differentiates; nothing here implements them).
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>

#include "kernels/tensor_io.hpp"
#include "kernels/torch/attention_graph.hpp"
#include "kernels/torch/subjects.hpp"
#include "kernels/torch/tensor_bridge.hpp"

namespace fc::kernels::pt {
namespace {

// Inputs as leaves of a fresh graph (copies: autograd never writes into the caller's buffers).
at::Tensor leaf(const TensorView& t, bool requires_grad) { return tensor_of(t).clone().requires_grad_(requires_grad); }

// torch::autograd::grad of the outputs that depend on the inputs (an output that does not require
// grad contributes nothing).
std::vector<at::Tensor> gradients(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                                  const std::vector<at::Tensor>& cotangents, bool create_graph) {
  std::vector<at::Tensor> used_outputs, used_cotangents;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && outputs[i].requires_grad()) used_outputs.push_back(outputs[i]), used_cotangents.push_back(cotangents[i]);
  }
  if (used_outputs.empty()) return std::vector<at::Tensor>(inputs.size());
  return torch::autograd::grad(used_outputs, inputs, used_cotangents, /*retain_graph=*/c10::optional<bool>(create_graph),
                               create_graph, /*allow_unused=*/true);
}

// Why this libtorch's CPU path cannot stand for PyTorch's math path in `dtype`, or "" when it can.
// Two things are probed, once, on a few values:
//  - the whole graph (fwd and both derivatives) runs: libtorch 1.13 has no CPU matmul for Half
//    ("addmm_impl_cpu_" not implemented);
//  - a 16-bit matmul accumulates in fp32, the math path's contract (and what cuBLAS does on the GPU):
//    1 + 16 terms of u/2 sums to 1 + 8u, exactly representable, in fp32, but stays 1 when each partial
//    sum is rounded to the 16-bit format. libtorch 1.13's CPU bf16 matmul rounds so for small inner
//    dimensions (measured: 8-12x the fp32-accumulated error at K = 17, equal at K = 300), which would
//    grade that gemm, not the math path.
// A format with a reason is not declared, so the harness never draws a case for it; `flashcheck list`
// shows the reason.
std::string unfaithful_reason(at::ScalarType dtype) {
  try {
    const c10::AutoGradMode grad_mode(true);
    const auto options = at::TensorOptions().dtype(dtype);
    const at::Tensor q = at::ones({1, 1, 2, 2}, options).requires_grad_(true), k = at::ones({1, 1, 2, 2}, options).requires_grad_(true);
    const at::Tensor v = at::ones({1, 1, 2, 2}, options).requires_grad_(true);
    const AttentionGraph g = attention_graph(q, k, v, Mask::causal_top_left, 0.5, at::kFloat);
    const std::vector<at::Tensor> first = torch::autograd::grad({g.o}, {q, k, v}, {at::ones_like(g.o)}, true, true);
    torch::autograd::grad(first, {q, k, v}, {at::ones_like(q), at::ones_like(k), at::ones_like(v)}, false, false, true);
    if (dtype == at::kHalf || dtype == at::kBFloat16) {
      const double u = dtype == at::kHalf ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      at::Tensor row = at::full({4, 17}, u / 2, at::TensorOptions().dtype(at::kDouble));
      row.select(1, 0).fill_(1.0);
      const at::Tensor product = at::matmul(row.to(dtype), at::ones({17, 1}, options)).to(at::kDouble);
      if (!at::equal(product, at::full({4, 1}, 1 + 8 * u, product.options()))) {
        return "its CPU matmul does not accumulate " + std::string(c10::toString(dtype)) + " products in fp32";
      }
    }
    return "";
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
}

class TorchMath final : public Subject {
 public:
  TorchMath() {
    info_.name = "torch.math";
    info_.description =
        "PyTorch eager attention in the policy's dtype (matmul, masked softmax, matmul; scale split over q and k), "
        "bwd and bwdbwd by autograd: the math path a PyTorch user gets; materialises [Nq, Nk]";
    info_.family = Family::attention;
    info_.ops = {Op::fwd, Op::bwd, Op::bwdbwd};
    std::string left_out;
    for (Format f : {Format::bf16, Format::fp16, Format::fp32, Format::fp64}) {
      const std::string reason = unfaithful_reason(dtype_of(f));
      if (reason.empty()) {
        info_.formats.push_back(f);
      } else {
        left_out += std::string(left_out.empty() ? "" : "; ") + std::string(fc::name(f)) + ": " + reason;
      }
    }
    if (!left_out.empty()) info_.description += " (left out on this libtorch, " + left_out + ")";
    info_.max_head_dim = 256;
    info_.masks = {Mask::none, Mask::causal_top_left, Mask::causal_bottom_right};
    info_.deterministic = true;
    info_.host_allocations_counted = false;  // ATen's CPU allocator, not operator new
  }
  const SubjectInfo& info() const override { return info_; }

  void run(Op op, const AttentionCall& c) override {
    validate_call(info_, op, c);
    require_uniform_policy(info_, c.policy);
    for (auto [t, what] : {std::pair{&c.q, "Q"}, std::pair{&c.k, "K"}, std::pair{&c.v, "V"}}) require_finite(*t, info_.name, what);
    if (op != Op::fwd) require_finite(c.dout, info_.name, "dO");
    if (op == Op::bwdbwd) {
      for (auto [t, what] : {std::pair{&c.ddq, "ddQ"}, std::pair{&c.ddk, "ddK"}, std::pair{&c.ddv, "ddV"}}) require_finite(*t, info_.name, what);
    }
    try {
      compute(op, c);
    } catch (const c10::Error& e) {
      rethrow_as_subject_error(info_, e);
    }
  }

 private:
  void compute(Op op, const AttentionCall& c) const {
    const c10::AutoGradMode grad_mode(op != Op::fwd);
    const bool differentiate = op != Op::fwd;
    const at::Tensor q = leaf(c.q, differentiate), k = leaf(c.k, differentiate), v = leaf(c.v, differentiate);
    const AttentionGraph g = attention_graph(q, k, v, c.mask, c.scale, dtype_of(c.policy.format(Role::stats)));
    if (op == Op::fwd) {
      store(c.out_o, g.o);
      if (!c.out_lse.empty()) store(c.out_lse, g.lse);
      return;
    }
    const at::Tensor dout = leaf(c.dout, op == Op::bwdbwd);
    const std::vector<at::Tensor> first = gradients({g.o}, {q, k, v}, {dout}, op == Op::bwdbwd);
    if (op == Op::bwd) {
      store(c.dq, first[0]), store(c.dk, first[1]), store(c.dv, first[2]);
      return;
    }
    const std::vector<at::Tensor> second =
        gradients(first, {q, k, v, dout}, {leaf(c.ddq, false), leaf(c.ddk, false), leaf(c.ddv, false)}, false);
    store(c.dq2, second[0]), store(c.dk2, second[1]), store(c.dv2, second[2]), store(c.ddo, second[3]);
  }

  SubjectInfo info_;
};

}  // namespace

std::unique_ptr<Subject> make_torch_math() { return std::make_unique<TorchMath>(); }

}  // namespace fc::kernels::pt
