// The Attention Residuals ops of the `flashcheck` PyTorch library (EQUATIONS.md section 4):
//   attnres_phase1_forward(values [N, B, T, D], queries [S, D])            -> (o [S, B, T, D], lse [S, B, T])
//   attnres_phase1_backward(values, queries, lse, d_o, d_lse)               -> (d_values, d_queries)
//   attnres_phase2_forward(o, lse, partial [S, B, T, D], queries)           -> h [S, B, T, D]
//   attnres_phase2_backward(o, lse, partial, queries, dh)                   -> (d_o, d_lse, d_partial, d_queries)
//   attnres_phase1(values, queries), attnres_phase2(o, lse, partial, queries): the same with autograd
//   attnres(values, partial, queries)                                       -> h: block AttnRes, phase 1 then 2, with autograd
// values, partial, queries, o, h and their gradients share one dtype (bf16, fp16, fp32, fp64); lse and
// d_lse are fp32 (fp64 with fp64). The CPU kernels are cpu.attnres's (attnres_phases.hpp), accumulating
// in fp32 (fp64 for fp64); outputs rounded to nearest. CUDA tensors run cuda.attnres's kernels
// (attnres_cuda.cpp; float32, bfloat16, float16), the same algorithm and rounding points. o and h are convex combinations of the inputs,
// so an fp16 result cannot overflow where its inputs did not.
//
// Second derivatives: the first-order gradients come from the kernels; their derivatives are taken by
// autograd through eager PyTorch formulas of the phase (attnres_reference below), recomputed from the
// saved inputs. Everything in AttnRes is per token (at most N x S logits per token), so the recomputed
// graph is linear in the number of tokens; it computes in fp32 (fp64 for fp64).
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "kernels/cpu/attnres_phases.hpp"
#include "kernels/torch/ops/attention_ops.hpp"
#include "kernels/torch/ops/attnres_cuda.hpp"
#include "kernels/torch/ops/op_support.hpp"
#include "kernels/torch/tensor_bridge.hpp"

namespace fc::kernels::pt::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType compute_dtype(const at::Tensor& like) { return like.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// The dimensions of a call, checked: values [N, B, T, D] (or o/partial [S, B, T, D]), queries [S, D].
cpu::attnres::Dims dims_of(const char* op, const at::Tensor& per_layer_or_source, const at::Tensor& queries, int64_t sources,
                           double eps) {
  const at::Tensor& x = per_layer_or_source;
  TORCH_CHECK(x.defined() && x.dim() == 4, "flashcheck.", op, ": expected [N or S, B, T, D] tensors, got ",
              x.defined() ? x.sizes() : at::IntArrayRef{});
  TORCH_CHECK(format_of(x.scalar_type()), "flashcheck.", op, ": dtype ", x.scalar_type(),
              " is not supported (float64, float32, float16, bfloat16)");
  check_tensor(op, "queries", queries, 2, x.scalar_type(), x.device());
  TORCH_CHECK(queries.size(1) == x.size(3), "flashcheck.", op, ": queries are [S, D] with D = ", x.size(3), ", got ", queries.sizes());
  TORCH_CHECK(std::isfinite(eps) && eps > 0, "flashcheck.", op, ": eps must be finite and > 0, got ", eps);
  TORCH_CHECK(x.size(3) <= 8192, "flashcheck.", op, ": D = ", x.size(3), " is above the supported 8192");
  return {static_cast<int>(sources), static_cast<int>(x.size(1) * x.size(2)), static_cast<int>(x.size(3)),
          static_cast<int>(queries.size(0)), eps};
}

// CPU tensors run cpu.attnres's kernels here, CUDA tensors cuda.attnres's (attnres_cuda.cpp).
void require_cpu_or_cuda(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), "flashcheck.", op, ": tensors on ", t.device(), " are not supported");
}

template <class A>
A* ptr(at::Tensor& t) {
  return t.data_ptr<A>();
}

// The inputs in the accumulation type, contiguous (exact widening).
at::Tensor widened(const at::Tensor& t, at::ScalarType acc) { return t.to(acc).contiguous(); }

std::tuple<at::Tensor, at::Tensor> phase1_forward(const at::Tensor& values, const at::Tensor& queries, double eps,
                                                  AttnResInputCheck* shared = nullptr) {
  const char* op = "attnres_phase1_forward";
  const cpu::attnres::Dims d = dims_of(op, values, queries, values.dim() == 4 ? values.size(0) : 0, eps);
  check_tensor(op, "values", values, 4, values.scalar_type(), values.device());
  require_cpu_or_cuda(op, values);
  if (values.is_cuda()) return attnres_phase1_forward_cuda(values, queries, eps, shared);
  check_finite(op, "values", values), check_finite(op, "queries", queries);
  const at::ScalarType acc = compute_dtype(values);
  at::Tensor v = widened(values, acc), w = widened(queries, acc);
  at::Tensor o = at::empty({d.layers, values.size(1), values.size(2), d.dim}, values.options().dtype(acc));
  at::Tensor lse = at::empty({d.layers, values.size(1), values.size(2)}, values.options().dtype(acc));
  if (acc == at::kDouble) {
    cpu::attnres::phase1_forward(d, ptr<double>(v), ptr<double>(w), ptr<double>(o), ptr<double>(lse));
  } else {
    cpu::attnres::phase1_forward(d, ptr<float>(v), ptr<float>(w), ptr<float>(o), ptr<float>(lse));
  }
  return {o.to(values.scalar_type()), lse};
}

// (finite: checked here for CPU tensors; the CUDA ops check all their inputs with one transfer)
void check_lse(const char* op, const char* what, const at::Tensor& lse, const at::Tensor& like4, bool finite) {
  check_tensor(op, what, lse, 3, compute_dtype(like4), like4.device());
  check_same_shape(op, what, lse, {like4.size(0), like4.size(1), like4.size(2)});
  if (finite) check_finite(op, what, lse);
}

std::tuple<at::Tensor, at::Tensor> phase1_backward(const at::Tensor& values, const at::Tensor& queries, const at::Tensor& lse,
                                                   const at::Tensor& d_o, const at::Tensor& d_lse, double eps,
                                                   AttnResInputCheck* shared = nullptr) {
  const char* op = "attnres_phase1_backward";
  const cpu::attnres::Dims d = dims_of(op, values, queries, values.dim() == 4 ? values.size(0) : 0, eps);
  check_tensor(op, "values", values, 4, values.scalar_type(), values.device());
  require_cpu_or_cuda(op, values);
  check_tensor(op, "d_o", d_o, 4, values.scalar_type(), values.device());
  check_same_shape(op, "d_o", d_o, {d.layers, values.size(1), values.size(2), d.dim});
  check_lse(op, "lse", lse, d_o, values.is_cpu()), check_lse(op, "d_lse", d_lse, d_o, values.is_cpu());
  if (values.is_cuda()) return attnres_phase1_backward_cuda(values, queries, lse, d_o, d_lse, eps, shared);
  check_finite(op, "values", values), check_finite(op, "queries", queries), check_finite(op, "d_o", d_o);
  const at::ScalarType acc = compute_dtype(values);
  at::Tensor v = widened(values, acc), w = widened(queries, acc), l = widened(lse, acc), g = widened(d_o, acc), gl = widened(d_lse, acc);
  at::Tensor dv = at::empty_like(v), dw = at::empty_like(w);
  if (acc == at::kDouble) {
    cpu::attnres::phase1_backward(d, ptr<double>(v), ptr<double>(w), ptr<double>(l), ptr<double>(g), ptr<double>(gl), ptr<double>(dv),
                                  ptr<double>(dw));
  } else {
    cpu::attnres::phase1_backward(d, ptr<float>(v), ptr<float>(w), ptr<float>(l), ptr<float>(g), ptr<float>(gl), ptr<float>(dv),
                                  ptr<float>(dw));
  }
  return {dv.to(values.scalar_type()), dw.to(values.scalar_type())};
}

void check_phase2_inputs(const char* op, const cpu::attnres::Dims& d, const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial) {
  check_tensor(op, "o", o, 4, o.scalar_type(), o.device());
  require_cpu_or_cuda(op, o);
  check_tensor(op, "partial", partial, 4, o.scalar_type(), o.device());
  check_same_shape(op, "partial", partial, o.sizes());
  TORCH_CHECK(o.size(0) == d.layers, "flashcheck.", op, ": o has ", o.size(0), " layers, queries ", d.layers);
  check_lse(op, "lse", lse, o, o.is_cpu());
  if (o.is_cpu()) check_finite(op, "o", o), check_finite(op, "partial", partial);
}

at::Tensor phase2_forward(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial, const at::Tensor& queries, double eps,
                          AttnResInputCheck* shared = nullptr) {
  const char* op = "attnres_phase2_forward";
  const cpu::attnres::Dims d = dims_of(op, o, queries, 1, eps);
  check_phase2_inputs(op, d, o, lse, partial);
  if (o.is_cuda()) return attnres_phase2_forward_cuda(o, lse, partial, queries, eps, shared);
  check_finite(op, "queries", queries);
  const at::ScalarType acc = compute_dtype(o);
  at::Tensor o_ = widened(o, acc), l = widened(lse, acc), u = widened(partial, acc), w = widened(queries, acc);
  at::Tensor h = at::empty_like(o_);
  if (acc == at::kDouble) {
    cpu::attnres::phase2_forward(d, ptr<double>(o_), ptr<double>(l), ptr<double>(u), ptr<double>(w), ptr<double>(h));
  } else {
    cpu::attnres::phase2_forward(d, ptr<float>(o_), ptr<float>(l), ptr<float>(u), ptr<float>(w), ptr<float>(h));
  }
  return h.to(o.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> phase2_backward(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial,
                                                                           const at::Tensor& queries, const at::Tensor& dh, double eps,
                                                                           AttnResInputCheck* shared = nullptr) {
  const char* op = "attnres_phase2_backward";
  const cpu::attnres::Dims d = dims_of(op, o, queries, 1, eps);
  check_phase2_inputs(op, d, o, lse, partial);
  check_tensor(op, "dh", dh, 4, o.scalar_type(), o.device());
  check_same_shape(op, "dh", dh, o.sizes());
  if (o.is_cuda()) return attnres_phase2_backward_cuda(o, lse, partial, queries, dh, eps, shared);
  check_finite(op, "queries", queries), check_finite(op, "dh", dh);
  const at::ScalarType acc = compute_dtype(o);
  at::Tensor o_ = widened(o, acc), l = widened(lse, acc), u = widened(partial, acc), w = widened(queries, acc), g = widened(dh, acc);
  at::Tensor d_o = at::empty_like(o_), d_lse = at::empty_like(l), du = at::empty_like(u), dw = at::empty_like(w);
  if (acc == at::kDouble) {
    cpu::attnres::phase2_backward(d, ptr<double>(o_), ptr<double>(l), ptr<double>(u), ptr<double>(w), ptr<double>(g), ptr<double>(d_o),
                                  ptr<double>(d_lse), ptr<double>(du), ptr<double>(dw));
  } else {
    cpu::attnres::phase2_backward(d, ptr<float>(o_), ptr<float>(l), ptr<float>(u), ptr<float>(w), ptr<float>(g), ptr<float>(d_o),
                                  ptr<float>(d_lse), ptr<float>(du), ptr<float>(dw));
  }
  const at::ScalarType t = o.scalar_type();
  return {d_o.to(t), d_lse, du.to(t), dw.to(t)};
}

// --- the eager formulas of the phases, for second derivatives ---------------------------------------

at::Tensor rms_inverse(const at::Tensor& x, double eps) { return at::rsqrt(x.pow(2).mean(-1) + eps); }

std::tuple<at::Tensor, at::Tensor> phase1_reference(const at::Tensor& v, const at::Tensor& w, double eps) {
  const at::Tensor r = rms_inverse(v, eps);                                        // [N, B, T]
  const at::Tensor logits = at::einsum("sd,nbtd->sbtn", {w, v}) * r.permute({1, 2, 0}).unsqueeze(0);  // [S, B, T, N]
  const at::Tensor p = at::softmax(logits, -1);
  return {at::einsum("sbtn,nbtd->sbtd", {p, v}), at::logsumexp(logits, -1)};
}

at::Tensor phase2_reference(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& u, const at::Tensor& w, double eps) {
  const at::Tensor su = rms_inverse(u, eps) * at::einsum("sd,sbtd->sbt", {w, u});
  const at::Tensor beta = at::sigmoid(su - lse).unsqueeze(-1);
  return o + beta * (u - o);
}

// d/d(primals, cotangents) of <J(primals)^T cotangents, grad_grads>, J the Jacobian of `reference`,
// by autograd through the reference recomputed in the accumulation dtype; each result in its input's dtype.
variable_list second_order(const std::function<variable_list(const variable_list&)>& reference, const variable_list& primals,
                           const variable_list& cotangents, const variable_list& grad_grads) {
  const at::ScalarType acc = compute_dtype(primals[0]);
  const c10::AutoGradMode on(true);
  variable_list p, c, inputs;
  for (const auto& x : primals) p.push_back(x.detach().to(acc).requires_grad_(true)), inputs.push_back(p.back());
  for (const auto& x : cotangents) {
    c.push_back(x.defined() ? x.detach().to(acc).requires_grad_(true) : at::Tensor());
    if (c.back().defined()) inputs.push_back(c.back());
  }
  const variable_list outputs = reference(p);
  variable_list used_outputs, used_cotangents;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (c[i].defined()) used_outputs.push_back(outputs[i]), used_cotangents.push_back(c[i]);
  }
  const variable_list first = torch::autograd::grad(used_outputs, p, used_cotangents, /*retain_graph=*/true, /*create_graph=*/true,
                                                    /*allow_unused=*/true);
  variable_list used_first, used_grad_grads;
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (first[i].defined() && first[i].requires_grad() && grad_grads[i].defined()) {
      used_first.push_back(first[i]), used_grad_grads.push_back(grad_grads[i].to(acc));
    }
  }
  variable_list second(inputs.size());
  if (!used_first.empty()) {
    second = torch::autograd::grad(used_first, inputs, used_grad_grads, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
  }
  // Back to one result per primal and per cotangent, in their dtypes (zero where nothing depended).
  variable_list results;
  std::size_t next = 0;
  const auto take = [&](const at::Tensor& like) {
    if (!like.defined()) return at::Tensor();
    const at::Tensor g = second[next++];
    return g.defined() ? g.to(like.scalar_type()) : at::zeros_like(like);
  };
  for (const auto& x : primals) results.push_back(take(x));
  for (const auto& x : cotangents) results.push_back(take(x));
  return results;
}

// J(primals)^T cotangents by autograd through the reference (differentiable when create_graph).
variable_list first_order(const std::function<variable_list(const variable_list&)>& reference, const variable_list& primals,
                          const variable_list& cotangents, bool create_graph) {
  const at::ScalarType acc = compute_dtype(primals[0]);
  const c10::AutoGradMode on(true);
  variable_list p;
  for (const auto& x : primals) p.push_back(create_graph ? x.to(acc) : x.detach().to(acc).requires_grad_(true));
  if (create_graph) {
    for (auto& x : p) {
      if (!x.requires_grad()) x = x.detach().requires_grad_(true);
    }
  }
  const variable_list outputs = reference(p);
  variable_list used_outputs, used_cotangents;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (cotangents[i].defined()) used_outputs.push_back(outputs[i]), used_cotangents.push_back(cotangents[i].to(acc));
  }
  variable_list g(p.size());
  if (!used_outputs.empty()) g = torch::autograd::grad(used_outputs, p, used_cotangents, true, create_graph, true);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = g[i].defined() ? g[i].to(primals[i].scalar_type()) : at::zeros_like(primals[i]);
  return g;
}

enum class Phase { one, two };

std::function<variable_list(const variable_list&)> reference_of(Phase phase, double eps) {
  if (phase == Phase::one) {
    return [eps](const variable_list& p) {
      auto [o, lse] = phase1_reference(p[0], p[1], eps);
      return variable_list{o, lse};
    };
  }
  return [eps](const variable_list& p) { return variable_list{phase2_reference(p[0], p[1], p[2], p[3], eps)}; };
}

// second_order as a graph node of its own. Its outputs (H gg, J gg) are linear in the grad_grads gg
// (H the Hessian of <cotangents, reference(primals)> in the primals, J the Jacobian of the reference),
// so their gradient with respect to gg, for output cotangents (a_p, a_c), is H a_p + J^T a_c: what
// torch.autograd.functional.hvp (the "double backward trick") needs. A true third derivative (with
// respect to the primals or the cotangents) is refused when it is taken.
struct SecondOrderFunction : torch::autograd::Function<SecondOrderFunction> {
  // The lists as at::TensorList: only that (not std::vector) makes autograd see their tensors as inputs.
  static variable_list forward(AutogradContext* ctx, Phase phase, double eps, at::TensorList primals, at::TensorList cotangents,
                               at::TensorList grad_grads) {
    variable_list saved = primals.vec();
    saved.insert(saved.end(), cotangents.begin(), cotangents.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["phase"] = static_cast<int64_t>(phase), ctx->saved_data["eps"] = eps;
    ctx->saved_data["primals"] = static_cast<int64_t>(primals.size());
    return second_order(reference_of(phase, eps), primals.vec(), cotangents.vec(), grad_grads.vec());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const auto np = static_cast<std::size_t>(ctx->saved_data["primals"].toInt()), nc = s.size() - np;
    TORCH_CHECK(!ctx->needs_input_grad({{0, np + nc}}),
                "flashcheck.attnres: third derivatives are not implemented (a gradient of the second-order gradient with "
                "respect to the inputs or the first-order cotangents was requested)");
    variable_list result(2 + np + nc + np);  // phase and eps first: one entry per forward argument
    const Phase phase = static_cast<Phase>(ctx->saved_data["phase"].toInt());
    const double eps = ctx->saved_data["eps"].toDouble();
    const variable_list primals(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(np));
    const variable_list cotangents(s.begin() + static_cast<std::ptrdiff_t>(np), s.end());
    const variable_list a_p(grads.begin(), grads.begin() + static_cast<std::ptrdiff_t>(np));
    const variable_list a_c(grads.begin() + static_cast<std::ptrdiff_t>(np), grads.end());
    const variable_list h = apply(phase, eps, at::TensorList(primals), at::TensorList(cotangents), at::TensorList(a_p));  // H a_p
    const variable_list j = first_order(reference_of(phase, eps), primals, a_c, at::GradMode::is_enabled());
    for (std::size_t i = 0; i < np; ++i) result[2 + np + nc + i] = h[i] + j[i];
    return result;
  }
};

struct Phase1BackwardFunction : torch::autograd::Function<Phase1BackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& values, const at::Tensor& queries, const at::Tensor& lse,
                               const at::Tensor& d_o, const at::Tensor& d_lse, double eps) {
    auto [dv, dw] = phase1_backward(values, queries, lse, d_o, d_lse, eps);
    ctx->save_for_backward({values, queries, d_o, d_lse});
    ctx->saved_data["eps"] = eps;
    return {dv, dw};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const double eps = ctx->saved_data["eps"].toDouble();
    const variable_list r = SecondOrderFunction::apply(Phase::one, eps, at::TensorList({s[0], s[1]}), at::TensorList({s[2], s[3]}),
                                                       at::TensorList(grads));
    return {r[0], r[1], at::Tensor(), r[2], r[3], at::Tensor()};
  }
};

struct Phase1Function : torch::autograd::Function<Phase1Function> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& values, const at::Tensor& queries, double eps) {
    auto [o, lse] = phase1_forward(values, queries, eps);
    ctx->save_for_backward({values, queries, lse});
    ctx->saved_data["eps"] = eps;
    return {o, lse};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const variable_list g = Phase1BackwardFunction::apply(s[0], s[1], s[2].detach(), grads[0], grads[1], ctx->saved_data["eps"].toDouble());
    return {g[0], g[1], at::Tensor()};
  }
};

struct Phase2BackwardFunction : torch::autograd::Function<Phase2BackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial,
                               const at::Tensor& queries, const at::Tensor& dh, double eps) {
    auto [d_o, d_lse, du, dw] = phase2_backward(o, lse, partial, queries, dh, eps);
    ctx->save_for_backward({o, lse, partial, queries, dh});
    ctx->saved_data["eps"] = eps;
    return {d_o, d_lse, du, dw};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const double eps = ctx->saved_data["eps"].toDouble();
    const variable_list r =
        SecondOrderFunction::apply(Phase::two, eps, at::TensorList({s[0], s[1], s[2], s[3]}), at::TensorList(s[4]),
                                   at::TensorList(grads));
    return {r[0], r[1], r[2], r[3], r[4], at::Tensor()};
  }
};

struct Phase2Function : torch::autograd::Function<Phase2Function> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial,
                            const at::Tensor& queries, double eps) {
    ctx->save_for_backward({o, lse, partial, queries});
    ctx->saved_data["eps"] = eps;
    return phase2_forward(o, lse, partial, queries, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const variable_list g = Phase2BackwardFunction::apply(s[0], s[1], s[2], s[3], grads[0], ctx->saved_data["eps"].toDouble());
    return {g[0], g[1], g[2], g[3], at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> phase1(const at::Tensor& values, const at::Tensor& queries, double eps) {
  const variable_list r = Phase1Function::apply(values, queries, eps);
  return {r[0], r[1]};
}

at::Tensor phase2(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial, const at::Tensor& queries, double eps) {
  return Phase2Function::apply(o, lse, partial, queries, eps);
}

// Block AttnRes (phase 1 over the N completed blocks, then phase 2 with each layer's partial sum) as one
// node: the composition of attnres_phase1 and attnres_phase2, bit for bit, but on CUDA tensors both
// phases' kernels (or both backwards') report NaN/Inf into one check, so a first-order pass waits for the
// device once rather than twice (each wait idles the device while the host issues what follows; the H200
// step at attnres_bench's shape spent about 0.3 ms in the two extra waits).
// o and lse are saved with save_for_backward, so saved-tensor hooks (activation checkpointing, offloading)
// see them. The price: o lives to the end of the backward, where the composed ops let it go after phase
// 2's backward (the step's peak at attnres_bench's shape: 1166 MiB against 1035).
struct BlockFunction : torch::autograd::Function<BlockFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& values, const at::Tensor& partial, const at::Tensor& queries, double eps) {
    AttnResInputCheck check("attnres");
    auto [o, lse] = phase1_forward(values, queries, eps, &check);
    at::Tensor h = phase2_forward(o, lse, partial, queries, eps, &check);
    check.finish();
    ctx->save_for_backward({values, partial, queries, o, lse});
    ctx->saved_data["eps"] = eps;
    return h;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &values = s[0], &partial = s[1], &queries = s[2], &o = s[3], &lse = s[4];
    const double eps = ctx->saved_data["eps"].toDouble();
    if (at::GradMode::is_enabled()) {
      // The gradient's own graph is wanted (a second derivative): phase 1 again with autograd, then the
      // per-phase backward nodes, which carry second order (the graph the composed ops build; each checks
      // its own inputs).
      const variable_list o_lse = Phase1Function::apply(values, queries, eps);
      const variable_list g2 = Phase2BackwardFunction::apply(o_lse[0], o_lse[1], partial, queries, grads[0], eps);
      const variable_list g1 = Phase1BackwardFunction::apply(values, queries, o_lse[1].detach(), g2[0], g2[1], eps);
      return {g1[0], g2[2], g2[3] + g1[1], at::Tensor()};
    }
    AttnResInputCheck check("attnres");
    auto [d_o, d_lse, d_partial, dw2] = phase2_backward(o, lse, partial, queries, grads[0], eps, &check);
    if (!ctx->needs_input_grad(0) && !ctx->needs_input_grad(2)) {  // (nothing wants phase 1's backward)
      check.finish();
      return {at::Tensor(), d_partial, at::Tensor(), at::Tensor()};
    }
    auto [d_values, dw1] = phase1_backward(values, queries, lse, d_o, d_lse, eps, &check);
    check.finish();
    // dw2 + dw1: autograd's sum of the composed ops' two gradients (the same bits while nothing else in
    // the graph adds a third gradient to the queries: autograd may then sum in another order)
    return {d_values, d_partial, dw2 + dw1, at::Tensor()};
  }
};

at::Tensor block(const at::Tensor& values, const at::Tensor& partial, const at::Tensor& queries, double eps) {
  return BlockFunction::apply(values, partial, queries, eps);
}

// The registered kernels (the schema has no shared check: each call checks its own inputs).
std::tuple<at::Tensor, at::Tensor> phase1_forward_op(const at::Tensor& values, const at::Tensor& queries, double eps) {
  return phase1_forward(values, queries, eps);
}
std::tuple<at::Tensor, at::Tensor> phase1_backward_op(const at::Tensor& values, const at::Tensor& queries, const at::Tensor& lse,
                                                      const at::Tensor& d_o, const at::Tensor& d_lse, double eps) {
  return phase1_backward(values, queries, lse, d_o, d_lse, eps);
}
at::Tensor phase2_forward_op(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial, const at::Tensor& queries, double eps) {
  return phase2_forward(o, lse, partial, queries, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> phase2_backward_op(const at::Tensor& o, const at::Tensor& lse, const at::Tensor& partial,
                                                                              const at::Tensor& queries, const at::Tensor& dh, double eps) {
  return phase2_backward(o, lse, partial, queries, dh, eps);
}

}  // namespace

void define_attnres_ops(torch::Library& m) {
  // The kernels themselves (CPU tensors: cpu.attnres's; CUDA tensors: cuda.attnres's).
  m.def("attnres_phase1_forward(Tensor values, Tensor queries, float eps=1e-06) -> (Tensor, Tensor)", &phase1_forward_op);
  m.def("attnres_phase1_backward(Tensor values, Tensor queries, Tensor lse, Tensor d_o, Tensor d_lse, float eps=1e-06) -> (Tensor, Tensor)",
        &phase1_backward_op);
  m.def("attnres_phase2_forward(Tensor o, Tensor lse, Tensor partial, Tensor queries, float eps=1e-06) -> Tensor", &phase2_forward_op);
  m.def("attnres_phase2_backward(Tensor o, Tensor lse, Tensor partial, Tensor queries, Tensor dh, float eps=1e-06) "
        "-> (Tensor, Tensor, Tensor, Tensor)",
        &phase2_backward_op);
  // With autograd (to second order).
  m.def("attnres_phase1(Tensor values, Tensor queries, float eps=1e-06) -> (Tensor, Tensor)", &phase1);
  m.def("attnres_phase2(Tensor o, Tensor lse, Tensor partial, Tensor queries, float eps=1e-06) -> Tensor", &phase2);
  m.def("attnres(Tensor values, Tensor partial, Tensor queries, float eps=1e-06) -> Tensor", &block);
}

}  // namespace fc::kernels::pt::ops
